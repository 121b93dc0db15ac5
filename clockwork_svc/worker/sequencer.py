"""Ordering keys and overlap policies: a tenant's firings with the same sequence key
(`planning.sequence_key`: the ordering key, or the schedule of one with an overlap
policy) are delivered in order, each only after the previous delivery succeeded or gave
up. Under the overlap policy SKIP a firing whose turn comes while the key is busy is
not kept waiting: it is to be recorded SKIPPED.

Per (tenant, key) this worker keeps at most one delivery in flight; later firings wait
in (occurrence, attempt) order. While a delivery of the key has a retry pending, the
key is *blocked* by that delivery. The block is also stored (the dispatcher writes it
before the firing is marked done), so a worker that takes the shard over after a crash
loads it and still lets the pending retry go first. All firings of one key live in one
shard (the shard is chosen from the ordering key), so one worker sees them all.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from clockwork_svc.domain.model import Firing, Outcome
from clockwork_svc.domain.planning import sequence_key
from clockwork_svc.domain.spec import OverlapPolicy


class HasFiring(Protocol):
    @property
    def firing(self) -> Firing: ...


T = TypeVar("T", bound=HasFiring)


class BlockSource(Protocol):
    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str: ...


@dataclass
class _Key(Generic[T]):
    shard: int
    loaded: bool = False
    blocker: str = ""  # delivery id with a pending retry, or ""
    in_flight: str = ""  # delivery id being delivered now, or ""
    waiting: list[tuple[int, int, str, int, T]] = field(default_factory=list)


class OrderingSequencer(Generic[T]):
    def __init__(self, store: BlockSource) -> None:
        self._store = store
        self._keys: dict[tuple[str, str], _Key[T]] = {}
        self._counter = itertools.count()

    async def admit(self, item: T) -> bool | None:
        """True: deliver now. False: parked here until `completed` releases it. None:
        skip it (overlap SKIP, the key busy with another delivery)."""
        f = item.firing
        name = sequence_key(f)
        key = self._keys.setdefault((f.tenant, name), _Key(f.shard))
        if not key.loaded:
            key.blocker = await self._store.get_ordering_block(f.tenant, name)
            key.loaded = True
        busy = key.in_flight not in ("", f.delivery_id)
        blocked = key.blocker not in ("", f.delivery_id)
        earlier_waiting = bool(key.waiting) and key.waiting[0][0] < f.occurrence_ms
        if (busy or blocked) and f.overlap is OverlapPolicy.SKIP:
            return None
        if busy or blocked or (earlier_waiting and f.delivery_id != key.blocker):
            entry = (f.occurrence_ms, f.attempt, f.firing_id, next(self._counter), item)
            heapq.heappush(key.waiting, entry)
            return False
        key.in_flight = f.delivery_id
        return True

    def completed(self, item: T, outcome: Outcome | None) -> list[T]:
        """Record how a delivery attempt ended; returns firings to dispatch next."""
        f = item.firing
        key = self._keys.get((f.tenant, sequence_key(f)))
        if key is None:
            return []
        key.in_flight = ""
        if outcome is Outcome.RETRYING:
            key.blocker = f.delivery_id
        elif key.blocker == f.delivery_id:
            key.blocker = ""
        return self._release(key)

    def forget_shard(self, shard: int) -> None:
        """The shard's next owner reads its firings and the stored blocks again."""
        for name in [n for n, key in self._keys.items() if key.shard == shard]:
            del self._keys[name]

    def _release(self, key: _Key[T]) -> list[T]:
        """The next firing the key may deliver: the blocker's retry if one is parked
        here, else (if nothing blocks) the earliest waiting firing."""
        if not key.waiting:
            return []
        if not key.blocker:
            return [heapq.heappop(key.waiting)[-1]]
        for index, entry in enumerate(key.waiting):
            if entry[-1].firing.delivery_id == key.blocker:
                key.waiting.pop(index)
                heapq.heapify(key.waiting)
                return [entry[-1]]
        return []
