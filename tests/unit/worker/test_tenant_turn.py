"""A tenant's concurrency turn covers its delivery, not the store writes after it.

With a limit of one concurrent delivery, the tenant's second firing goes out as soon
as the first delivery returns, while the first firing's record is still being
written; and two deliveries of the tenant are still never in flight together."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout, DeliveryResult, Firing, FiringRecord
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec, Target
from clockwork_svc.domain.tenant import TenantLimits
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.unit.worker.fakes import FixedTenants


class HeldRecords(SqliteStore):
    """Holds the record of schedule `first` until `release` is set."""

    release: asyncio.Event
    recording: asyncio.Event

    async def record_firing(self, record: FiringRecord) -> None:
        if record.execution.schedule_key == "first":
            self.recording.set()
            await self.release.wait()
        await super().record_firing(record)


class CountingSink:
    """Counts deliveries in flight; each takes `hold_s`."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.in_flight = 0
        self.most_in_flight = 0
        self.sent: list[str] = []

    async def deliver(
        self,
        target: Target,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
        traceparent: str = "",
    ) -> DeliveryResult:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.sent.append(firing.schedule_key)
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        return DeliveryResult(True, False, 200)

    async def close(self) -> None:
        return None


async def test_the_next_firing_goes_out_while_the_previous_record_is_written(
    tmp_path: Path,
) -> None:
    clock = SystemClock()
    store = await HeldRecords.open(tmp_path / "db", ClusterLayout(1, 60_000, clock.now_ms()))
    store.release, store.recording = asyncio.Event(), asyncio.Event()
    layout = await store.layout()
    sink = CountingSink(hold_s=0.05)
    settings = WorkerSettings(scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200))
    worker = Worker(
        store,
        sink,
        clock,
        layout,
        settings,
        Metrics(),
        tenants=FixedTenants(TenantLimits(max_concurrency=1)),
    )
    worker.start()
    worker.add_shard(0, clock.now_ms())
    scheduling = Scheduling(
        store, clock, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    try:
        due = clock.now_ms() + 300
        for key in ("first", "second"):
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        await asyncio.wait_for(store.recording.wait(), 10)
        deadline = time.monotonic() + 10
        # The first firing's record is held: the second must still be sent.
        while "second" not in sink.sent:
            assert time.monotonic() < deadline, f"sent only {sink.sent}"
            await asyncio.sleep(0.02)
        assert sink.sent == ["first", "second"]
        assert sink.most_in_flight == 1
        first = await store.get_schedule("acme", "first")
        assert first is not None and first.fired_count == 0  # its record still waits
    finally:
        store.release.set()
    try:
        deadline = time.monotonic() + 10
        while True:
            first = await store.get_schedule("acme", "first")
            if first is not None and first.fired_count == 1:
                break
            assert time.monotonic() < deadline, "the held record was never written"
            await asyncio.sleep(0.02)
    finally:
        await worker.stop()
        await store.close()
