"""Group commit for unary creates.

A create costs the api store requests (the schedule's compare-and-set, its first
firing); each request costs the client a future, a callback on the driver's thread and
a hop back to the event loop, and Cassandra a Paxos round per compare-and-set.
`CreateBatcher` makes one tenant's concurrent unary creates as batches
(`Scheduling.create_many`'s path): the schedules that share a partition are one
conditional batch (one Paxos round), and the first firings are written grouped by
partition. One batch per tenant is in flight at a time; creates that arrive
meanwhile queue and go out together as the next batch. So an idle api sends a create
at the end of its event-loop turn (no added wait), and a busy one sends fewer, larger
batches: the batch size follows the load, as in a database's group commit. One batch
in flight rather than several makes each batch larger, so more creates share each
partition's Paxos round, and concurrent batches of one tenant do not contend for the
same partitions. Measured with `bench.accept` against 4 in flight (alternating runs,
one Cassandra node): at 256 calls in flight 1,644-1,831 creates/s against
1,338-1,529, p99 280-288 ms against 359-390 ms, and less CPU per create in both the
api (0.44-0.48 ms against 0.54-0.60) and Cassandra; at 16 and 64 in flight too.

What a caller sees is unchanged: its create is answered exactly as it would be alone
(its own Created or error; a key twice in one batch is two creates of that key racing,
as two concurrent calls always were). A failure of the whole batch (the store
unavailable) is every member's error, and each member's retry is safe: creates are
idempotent on (tenant, key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from clockwork_svc.domain.model import Created, NewSchedule
from clockwork_svc.errors import ClockworkError

CreateAll = Callable[[str, Sequence[NewSchedule]], Awaitable[list[Created | ClockworkError]]]
"""Creates one tenant's requests together; returns each one's outcome, in order."""


@dataclass(slots=True)
class _Pending:
    request: NewSchedule
    answer: asyncio.Future[Created]


@dataclass(slots=True)
class _Tenant:
    queued: list[_Pending] = field(default_factory=list)
    in_flight: int = 0
    flush_scheduled: bool = False


class CreateBatcher:
    def __init__(
        self,
        create_all: CreateAll,
        max_batch: int,
        max_in_flight: int = 1,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        """`max_batch`: creates per batch; `max_in_flight`: batches in flight per
        tenant. While that many are in flight, new creates queue, and the next batch
        takes them all (up to `max_batch`): an idle api sends each create at the end
        of its event-loop turn, a busy one sends fewer, larger batches. `on_batch` is
        told the size of each batch sent."""
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be >= 1")
        self._create_all = create_all
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._on_batch = on_batch
        self._tenants: dict[str, _Tenant] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def create(self, tenant: str, request: NewSchedule) -> Created:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Created] = loop.create_future()
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
        state.queued.append(_Pending(request, answer))
        if not state.flush_scheduled and state.in_flight < self._max_in_flight:
            state.flush_scheduled = True
            loop.call_soon(self._flush, tenant, state)
        return await answer

    def _flush(self, tenant: str, state: _Tenant) -> None:
        state.flush_scheduled = False
        # A caller cancelled while its create waited (its deadline passed) is dropped:
        # nothing was written for it yet.
        state.queued = [r for r in state.queued if not r.answer.done()]
        while state.queued and state.in_flight < self._max_in_flight:
            batch, state.queued = state.queued[: self._max_batch], state.queued[self._max_batch :]
            state.in_flight += 1
            self._on_batch(len(batch))
            task = asyncio.create_task(
                self._send(tenant, state, batch), name="clockwork-create-batch"
            )
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if not state.queued and not state.in_flight:
            self._tenants.pop(tenant, None)

    async def _send(self, tenant: str, state: _Tenant, requests: list[_Pending]) -> None:
        try:
            await self._answer(tenant, requests)
        finally:
            state.in_flight -= 1
            self._flush(tenant, state)

    async def _answer(self, tenant: str, requests: list[_Pending]) -> None:
        try:
            outcomes = await self._create_all(tenant, [r.request for r in requests])
        except asyncio.CancelledError:
            for request in requests:
                request.answer.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - each caller re-raises it
            for request in requests:
                if not request.answer.done():
                    request.answer.set_exception(exc)
            return
        for request, outcome in zip(requests, outcomes, strict=True):
            if request.answer.done():
                continue  # its caller was cancelled; the create itself went ahead
            if isinstance(outcome, ClockworkError):
                request.answer.set_exception(outcome)
            else:
                request.answer.set_result(outcome)
