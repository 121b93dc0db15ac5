"""UNSAFE, for tests only: a worker with its fencing switched off, so that a stale owner
keeps firing. The fault checker's own test ("test the test",
tests/nemesis/test_fencing_switch.py) runs real worker processes with
CLOCKWORK_UNSAFE_DISABLE_FENCING_FOR_TESTS=1 (`ProcessSettings.unsafe_disable_fencing_for_tests`)
and shows the checker reports the duplicates that follow. The composition root
(app.py) loads it only when that switch is on.
"""

from __future__ import annotations

import logging
from typing import Any

from clockwork_svc.abc import Store
from clockwork_svc.domain.model import ShardCursor
from clockwork_svc.worker.worker import Worker

log = logging.getLogger(__name__)

WARNING = (
    "UNSAFE: fencing is DISABLED (CLOCKWORK_UNSAFE_DISABLE_FENCING_FOR_TESTS=1): "
    "this worker ignores its lease deadline, keeps its shards when its lease is "
    "lost and ignores the store's shard epochs, so it may deliver firings it no "
    "longer owns; for tests of the fault checker only"
)


class UnsafeHost:
    """UNSAFE, tests only: the worker as the coordinator sees it, except that losing the
    lease does not stop its shards (`drop_all_shards` is ignored). A shard is still
    given up when the coordinator's next session finds its key gone (`release_shard`)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    @property
    def owned_shards(self) -> dict[int, int]:
        return self._worker.owned_shards

    def add_shard(self, shard: int, epoch: int) -> None:
        self._worker.add_shard(shard, epoch)

    async def release_shard(self, shard: int) -> None:
        await self._worker.release_shard(shard)

    async def drop_all_shards(self) -> None:
        if self._worker.owned_shards:
            log.warning("UNSAFE: lease in doubt, keeping %d shards", len(self._worker.owned_shards))


class UnfencedStore:
    """UNSAFE, tests only: the worker's store with the epoch fence switched off.

    A cursor write that the store rejects because a newer epoch owns the shard is
    applied anyway (re-issued under the stored epoch) and reported as accepted, and a
    stale acquire gets the stored cursor: a fenced-off owner keeps its shards and its
    cursor writes land. Everything else goes to the real store unchanged.
    """

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def acquire_shard(self, shard: int, epoch: int) -> ShardCursor | None:
        cursor = await self._inner.acquire_shard(shard, epoch)
        if cursor is not None:
            return cursor
        stored = await self._inner.load_cursor(shard)
        log.warning("UNSAFE: shard %d acquired with stale epoch %d (%s)", shard, epoch, stored)
        position = stored.position_ms if stored is not None else (await self.layout()).created_ms
        return ShardCursor(shard, position, epoch)

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        if await self._inner.advance_cursor(shard, position_ms, epoch):
            return True
        stored = await self._inner.load_cursor(shard)
        if stored is not None:
            await self._inner.advance_cursor(shard, position_ms, stored.epoch)
            log.warning(
                "UNSAFE: stale cursor write applied: shard %d to %d with epoch %d over epoch %d",
                shard,
                position_ms,
                epoch,
                stored.epoch,
            )
        return True
