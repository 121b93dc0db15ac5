"""Read-ahead: a worker reads a firing's schedule before the due time and delivers at
the due time; the api holds the acknowledgement of a change to an active schedule
long enough that no read-ahead can send an occurrence due after it.
(planning.READ_AHEAD_MS explains the rule.)"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout, Schedule
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.planning import READ_AHEAD_MS
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec
from clockwork_svc.domain.tenant import TenantLimits
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.unit.worker.fakes import FixedTenants, RecordingSink

CLOCK = SystemClock()


class ReadTimes(SqliteStore):
    """The SQLite store, noting when each schedule was read (by the worker), and
    answering a read of a key in `slow` that much later (a slow or paused store)."""

    reads: dict[str, int]
    slow: dict[str, float]

    @classmethod
    async def opened(cls, path: Path) -> ReadTimes:
        """A new two-shard store at `path`, nothing read yet and nothing slow."""
        store = await cls.open(path, ClusterLayout(2, 60_000, CLOCK.now_ms()))
        assert isinstance(store, ReadTimes)
        store.reads = {}
        store.slow = {}
        return store

    async def get_schedule(self, tenant: str, key: str) -> Schedule | None:
        self.reads.setdefault(key, CLOCK.now_ms())
        await asyncio.sleep(self.slow.get(key, 0.0))
        return await super().get_schedule(tenant, key)


@dataclass
class Gate:
    """The worker's `may_dispatch` (is the lease deadline still far?)."""

    open: bool = True

    def __call__(self) -> bool:
        return self.open


@dataclass
class Node:
    store: ReadTimes
    sink: RecordingSink
    scheduling: Scheduling
    gate: Gate
    worker: Worker
    metrics: Metrics


@asynccontextmanager
async def node(tmp_path: Path, tenants: FixedTenants | None = None) -> AsyncIterator[Node]:
    store = await ReadTimes.opened(tmp_path / "db")
    layout = await store.layout()
    sink = RecordingSink()
    settings = WorkerSettings(scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200))
    gate = Gate()
    metrics = Metrics()
    worker = Worker(
        store, sink, CLOCK, layout, settings, metrics, may_dispatch=gate, tenants=tenants
    )
    worker.start()
    for shard in range(layout.shard_count):
        worker.add_shard(shard, CLOCK.now_ms())
    scheduling = Scheduling(
        store, CLOCK, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    try:
        yield Node(store, sink, scheduling, gate, worker, metrics)
    finally:
        await worker.stop()
        await store.close()


def once(at_ms: int) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(at_ms), HttpTarget("http://127.0.0.1:9/x"))


async def wait_for(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_the_schedule_is_read_ahead_and_the_delivery_leaves_at_the_due_time(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "k", once(due))
        await wait_for(lambda: "k" in n.sink.sent_ms)
        # Read ahead (at due - READ_AHEAD_MS, give or take the event loop), sent at
        # the due time, never before it.
        assert n.store.reads["k"] < due, n.store.reads["k"] - due
        assert n.sink.sent_ms["k"] >= due
        assert n.store.reads["k"] >= due - READ_AHEAD_MS - 50


def _read_late(metrics: Metrics) -> tuple[float | None, float | None]:
    """(count, sum in seconds) of clockwork_schedule_read_late_seconds."""
    sample = metrics.registry.get_sample_value
    return (
        sample("clockwork_schedule_read_late_seconds_count"),
        sample("clockwork_schedule_read_late_seconds_sum"),
    )


async def test_a_read_that_returns_after_the_due_time_is_counted_as_late(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "in-time", once(due))
        await wait_for(lambda: "in-time" in n.sink.sent_ms)
        assert _read_late(n.metrics) == (1.0, 0.0)  # read ahead: nothing late
        # A store that answers 400 ms after a read made ~250 ms before the due time.
        n.store.slow["slow"] = (READ_AHEAD_MS + 150) / 1000
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "slow", once(due))
        await wait_for(lambda: "slow" in n.sink.sent_ms)
        count, late_s = _read_late(n.metrics)
        assert count == 2.0 and late_s is not None
        sent_late_s = (n.sink.sent_ms["slow"] - due) / 1000
        assert 0.1 <= late_s <= sent_late_s + 0.01, (late_s, sent_late_s)


async def test_a_cancel_that_lands_after_the_read_ahead_is_acknowledged_after_the_due_time(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "k", once(due))
        # The worker has read the schedule (still active) ahead of the due time...
        await wait_for(lambda: "k" in n.store.reads)
        assert CLOCK.now_ms() < due
        await n.scheduling.cancel("acme", "k")  # ...so this cancel cannot stop it,
        acknowledged = CLOCK.now_ms()
        # ...and it is acknowledged only after the occurrence was due: what is sent
        # was due before the cancel's acknowledgement, as promised.
        assert due < acknowledged
        await wait_for(lambda: "k" in n.sink.sent_ms)


async def test_a_cancel_acknowledged_before_the_read_ahead_stops_the_firing(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_500
        await n.scheduling.create("acme", "k", once(due))
        await n.scheduling.cancel("acme", "k")
        assert CLOCK.now_ms() < due - READ_AHEAD_MS, "the cancel took too long to test this"
        await asyncio.sleep((due - CLOCK.now_ms()) / 1000 + 0.5)
        assert "k" in n.store.reads  # the worker did look at it...
        assert n.sink.sent_ms == {}  # ...and sent nothing


async def test_a_cancel_supersedes_an_overdue_firing_no_worker_has_started(
    tmp_path: Path,
) -> None:
    """The backlog of a dead worker: occurrences already due, not yet started by the
    successor. A cancel written before the successor reaches them wins: not sent."""
    store = await ReadTimes.opened(tmp_path / "db")
    layout = await store.layout()
    # No worker yet: the shards' owner is down.
    scheduling = Scheduling(store, CLOCK, layout, Limits(), AddressPolicy(allow_loopback=True))
    due = CLOCK.now_ms() + 100
    await scheduling.create("acme", "cancelled", once(due))
    await scheduling.create("acme", "kept", once(due))
    await asyncio.sleep(0.4)
    await scheduling.cancel("acme", "cancelled")  # overdue by now, and never started
    sink = RecordingSink()
    settings = WorkerSettings(scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200))
    worker = Worker(store, sink, CLOCK, layout, settings, Metrics())
    worker.start()
    try:
        for shard in range(layout.shard_count):  # the successor takes the shards over
            worker.add_shard(shard, CLOCK.now_ms())
        await wait_for(lambda: "kept" in sink.sent_ms)
        await wait_for(lambda: "cancelled" in store.reads)  # it did look at it...
        await asyncio.sleep(0.3)
        assert "cancelled" not in sink.sent_ms  # ...and superseded it
    finally:
        await worker.stop()
        await store.close()


async def test_only_changes_to_an_active_schedule_wait_for_the_read_ahead(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "db", ClusterLayout(2, 60_000, CLOCK.now_ms()))
    layout = await store.layout()
    scheduling = Scheduling(
        store, CLOCK, layout, Limits(), AddressPolicy(allow_loopback=True), read_ahead_ms=1_000
    )

    async def timed(call: object) -> float:
        started = time.monotonic()
        assert asyncio.iscoroutine(call)
        await call
        return time.monotonic() - started

    try:
        await scheduling.create("acme", "k", once(CLOCK.now_ms() + 3_600_000))
        assert await timed(scheduling.pause("acme", "k")) >= 1.0  # active -> paused
        assert await timed(scheduling.resume("acme", "k")) < 0.9  # nothing was active
        assert await timed(scheduling.update("acme", "k", once(CLOCK.now_ms() + 7_200_000))) >= 1.0
        await scheduling.pause("acme", "k")
        assert await timed(scheduling.cancel("acme", "k")) < 0.9  # paused -> cancelled
    finally:
        await store.close()


async def test_a_firing_whose_lease_deadline_nears_during_the_wait_is_held_then_delivered(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "k", once(due))
        await wait_for(lambda: "k" in n.store.reads)  # read ahead, now waiting...
        n.gate.open = False  # ...when the lease deadline comes near
        await asyncio.sleep((due - CLOCK.now_ms()) / 1000 + 0.5)
        assert n.sink.sent_ms == {}  # not sent past its due time without the lease
        n.gate.open = True
        await wait_for(lambda: "k" in n.sink.sent_ms)
        await asyncio.sleep(0.3)
        assert n.sink.delivered == ["k"]  # once


async def test_a_firing_whose_shard_is_dropped_during_the_wait_is_not_sent(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "k", once(due))
        await wait_for(lambda: "k" in n.store.reads)  # read ahead, now waiting...
        for shard in list(n.worker.owned_shards):
            await n.worker.drop_shard(shard)  # ...when its shard goes to another worker
        await asyncio.sleep((due - CLOCK.now_ms()) / 1000 + 0.5)
        assert n.sink.sent_ms == {}  # its new owner delivers it, not this worker


async def test_an_ordering_key_is_not_stuck_when_its_delivery_is_put_back(
    tmp_path: Path,
) -> None:
    """The firing in flight for an ordering key is put back (lease deadline near) while
    an earlier occurrence of the key waits behind it: it keeps the key's turn, so both
    are delivered once dispatch is allowed again (admitted afresh, it queued behind
    the earlier one, which waited for it: neither was ever sent)."""
    async with node(tmp_path) as n:
        later = CLOCK.now_ms() + 1_000
        spec = dataclasses.replace(once(later), ordering_key="o")
        await n.scheduling.create("acme", "later", spec)
        await wait_for(lambda: "later" in n.store.reads)  # in flight, waiting...
        earlier = dataclasses.replace(once(later - 200), ordering_key="o")
        await n.scheduling.create("acme", "earlier", earlier)  # ...parked behind it
        await asyncio.sleep(0.05)  # (the fire loop parks it)
        assert CLOCK.now_ms() < later - 50, "too slow to test this"
        n.gate.open = False
        await asyncio.sleep((later - CLOCK.now_ms()) / 1000 + 0.5)
        assert n.sink.sent_ms == {}
        n.gate.open = True
        await wait_for(lambda: len(n.sink.sent_ms) == 2)
        assert sorted(n.sink.delivered) == ["earlier", "later"]


async def test_the_rate_limit_counts_a_read_ahead_delivery_when_it_leaves(
    tmp_path: Path,
) -> None:
    # All four are popped READ_AHEAD_MS early; at 4/s with a burst of 1 they must
    # still leave 250 ms apart (taking the tokens at the pop let two leave together).
    # The worker owns every shard: its share of the limit is the whole of it.
    limited = FixedTenants(TenantLimits(rate_per_s=4, burst=1))
    async with node(tmp_path, limited) as n:
        due = CLOCK.now_ms() + 1_000
        for i in range(4):
            await n.scheduling.create("acme", f"k{i}", once(due))
        await wait_for(lambda: len(n.sink.sent_ms) == 4)
        sent = sorted(n.sink.sent_ms.values())
        assert sent[0] >= due
        gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
        assert min(gaps) >= 240, gaps


def _near(value: int | None, expected: int, slack_ms: int = 60) -> bool:
    return value is not None and abs(value - expected) <= slack_ms


async def test_quiet_time_runs_to_the_next_due_time_queued_read_or_waiting(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        assert n.worker.quiet_ms() is None  # nothing queued
        first, second = CLOCK.now_ms() + 1_500, CLOCK.now_ms() + 3_000
        await n.scheduling.create("acme", "first", once(first))
        await n.scheduling.create("acme", "second", once(second))
        # Both queued (not read yet): counted at their due time, not at the read-ahead.
        await wait_for(lambda: n.worker.quiet_ms() is not None)
        assert "first" not in n.store.reads
        assert _near(n.worker.quiet_ms(), first - CLOCK.now_ms())
        # Read, waiting for its due time: still the next send.
        await wait_for(lambda: "first" in n.store.reads)
        assert "first" not in n.sink.sent_ms
        assert _near(n.worker.quiet_ms(), first - CLOCK.now_ms())
        await wait_for(lambda: "first" in n.sink.sent_ms)
        assert _near(n.worker.quiet_ms(), second - CLOCK.now_ms())
        await wait_for(lambda: "second" in n.sink.sent_ms)
        assert n.worker.quiet_ms() is None


async def test_a_firing_whose_read_outlasts_its_due_time_leaves_no_quiet_time(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as n:
        n.store.slow["slow"] = (READ_AHEAD_MS + 400) / 1000
        due = CLOCK.now_ms() + 1_000
        await n.scheduling.create("acme", "slow", once(due))
        await wait_for(lambda: "slow" in n.store.reads)
        await wait_for(lambda: CLOCK.now_ms() > due + 50)
        assert "slow" not in n.sink.sent_ms
        quiet = n.worker.quiet_ms()
        assert quiet is not None and quiet < -40
        await wait_for(lambda: "slow" in n.sink.sent_ms)
        assert n.worker.quiet_ms() is None
