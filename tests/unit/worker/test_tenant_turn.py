"""A tenant's concurrency turn covers its delivery, not the store writes after it.

With a limit of one concurrent delivery, the tenant's second firing goes out as soon
as the first delivery returns, while the first firing's record is still being
written; and two deliveries of the tenant are still never in flight together."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout, FiringRecord
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec
from clockwork_svc.domain.tenant import TenantLimits
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.unit.worker.fakes import FixedTenants, RecordingSink


class HeldRecords(SqliteStore):
    """Holds the first firing record written until `release` is set."""

    release: asyncio.Event
    recording: asyncio.Event
    held_key = ""

    async def record_firing(self, record: FiringRecord) -> None:
        if not self.recording.is_set():
            self.recording.set()
            self.held_key = record.execution.schedule_key
            await self.release.wait()
        await super().record_firing(record)


class SlowRecords(SqliteStore):
    """Every firing record takes 200 ms: a firing holds its delivery slot that long
    after its delivery answered."""

    async def record_firing(self, record: FiringRecord) -> None:
        await asyncio.sleep(0.2)
        await super().record_firing(record)


@asynccontextmanager
async def one_shots(
    store: SqliteStore,
    sink: RecordingSink,
    settings: WorkerSettings,
    limits: TenantLimits,
    keys: Sequence[str],
    due_in_ms: int,
    spacing_ms: int = 0,
) -> AsyncIterator[None]:
    """A worker owning the store's one shard, and one-shots `keys` of tenant `acme`,
    the first due `due_in_ms` from now and each next `spacing_ms` later."""
    clock = SystemClock()
    layout = await store.layout()
    worker = Worker(store, sink, clock, layout, settings, Metrics(), tenants=FixedTenants(limits))
    worker.start()
    worker.add_shard(0, clock.now_ms())
    scheduling = Scheduling(
        store, clock, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    try:
        due = clock.now_ms() + due_in_ms
        for i, key in enumerate(keys):
            at = due + i * spacing_ms
            spec = ScheduleSpec(triggers.OnceTrigger(at), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        yield
    finally:
        await worker.stop()
        await store.close()


def _layout() -> ClusterLayout:
    return ClusterLayout(1, 60_000, SystemClock().now_ms())


async def _until(condition: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def test_the_next_firing_goes_out_while_the_previous_record_is_written(
    tmp_path: Path,
) -> None:
    store = await HeldRecords.open(tmp_path / "db", _layout())
    store.release, store.recording = asyncio.Event(), asyncio.Event()
    sink = RecordingSink(hold_s=0.05)
    settings = WorkerSettings(scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200))
    limits = TenantLimits(max_concurrency=1)
    async with one_shots(store, sink, settings, limits, ["first", "second"], 300):

        async def fired_count() -> int:
            held = await store.get_schedule("acme", store.held_key)
            assert held is not None
            return held.fired_count

        try:
            await asyncio.wait_for(store.recording.wait(), 10)

            async def both_sent() -> bool:
                return len(sink.delivered) == 2

            # The first delivered firing's record is held: the other is still sent.
            await _until(both_sent, 10, f"sent only {sink.delivered}")
            assert sink.delivered[0] == store.held_key
            assert sorted(sink.delivered) == ["first", "second"]
            assert sink.most_in_flight == 1
            assert await fired_count() == 0  # its record still waits
        finally:
            store.release.set()

        async def recorded() -> bool:
            return await fired_count() == 1

        await _until(recorded, 10, "the held record was never written")


async def test_a_tenants_parked_firings_keep_their_due_order(tmp_path: Path) -> None:
    # Two slots, both turns the tenant's: while the slots wait for records, the
    # firings falling due stay queued, and the tenant's turns run out; a parked
    # firing put back must not go behind the later ones queued meanwhile.
    store = await SlowRecords.open(tmp_path / "db", _layout())
    sink = RecordingSink()
    settings = WorkerSettings(max_concurrent_deliveries=2, max_tenant_share=1.0)
    keys = [f"k{i:02d}" for i in range(16)]
    async with one_shots(store, sink, settings, TenantLimits(), keys, 400, spacing_ms=20):

        async def all_sent() -> bool:
            return len(sink.delivered) == len(keys)

        await _until(all_sent, 20, f"sent only {sink.delivered}")
        assert sink.delivered == keys
