"""A tenant's concurrency turn, and a worker's delivery slot, cover the delivery:
not the read ahead of the due time, nor the store writes after the delivery.

With a limit of one concurrent delivery, the tenant's second firing goes out as soon
as the first delivery returns, while the first firing's record is still being
written; firings due together are all read ahead, whatever the limit; and two
deliveries of the tenant are still never in flight together."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import (
    ClusterLayout,
    DeliveryResult,
    Firing,
    FiringRecord,
    Schedule,
)
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


class SlowReads(SqliteStore):
    """Every schedule read takes READ_S."""

    READ_S = 0.15

    async def get_schedule(self, tenant: str, key: str) -> Schedule | None:
        await asyncio.sleep(self.READ_S)
        return await super().get_schedule(tenant, key)


class CountingSink:
    """Counts deliveries in flight; each takes `hold_s`."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.in_flight = 0
        self.most_in_flight = 0
        self.sent: list[str] = []
        self.sent_ms: list[int] = []

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
        self.sent_ms.append(time.time_ns() // 1_000_000)
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
        # The first delivered firing's record is held: the other must still be sent.
        while len(sink.sent) < 2:
            assert time.monotonic() < deadline, f"sent only {sink.sent}"
            await asyncio.sleep(0.02)
        assert sink.sent[0] == store.held_key
        assert sorted(sink.sent) == ["first", "second"]
        assert sink.most_in_flight == 1
        held = await store.get_schedule("acme", store.held_key)
        assert held is not None and held.fired_count == 0  # its record still waits
    finally:
        store.release.set()
    try:
        deadline = time.monotonic() + 10
        while True:
            held = await store.get_schedule("acme", store.held_key)
            if held is not None and held.fired_count == 1:
                break
            assert time.monotonic() < deadline, "the held record was never written"
            await asyncio.sleep(0.02)
    finally:
        await worker.stop()
        await store.close()


@pytest.mark.parametrize(
    ("limits", "settings"),
    [
        # The tenant's limit: one delivery at a time.
        (TenantLimits(max_concurrency=1), WorkerSettings()),
        # The worker's: one delivery slot (four places ahead of the due time).
        (TenantLimits(), WorkerSettings(max_concurrent_deliveries=1, max_tenant_share=1.0)),
    ],
    ids=["tenant-limit", "worker-slots"],
)
async def test_firings_due_together_are_all_read_ahead_whatever_the_limit(
    tmp_path: Path, limits: TenantLimits, settings: WorkerSettings
) -> None:
    clock = SystemClock()
    store = await SlowReads.open(tmp_path / "db", ClusterLayout(1, 60_000, clock.now_ms()))
    layout = await store.layout()
    sink = CountingSink(hold_s=0.0)
    worker = Worker(store, sink, clock, layout, settings, Metrics(), tenants=FixedTenants(limits))
    worker.start()
    worker.add_shard(0, clock.now_ms())
    scheduling = Scheduling(
        store, clock, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    try:
        due = clock.now_ms() + 700
        keys = [f"k{i}" for i in range(4)]
        for key in keys:
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        deadline = time.monotonic() + 10
        while len(sink.sent) < len(keys):
            assert time.monotonic() < deadline, f"sent only {sink.sent}"
            await asyncio.sleep(0.02)
        # Read one after another (a turn or a slot taken before each read), the last
        # would leave three reads (450 ms) late; read ahead together, none waits.
        assert max(sink.sent_ms) - due < 1000 * SlowReads.READ_S, sink.sent_ms
        assert min(sink.sent_ms) >= due
        assert sink.most_in_flight == 1
    finally:
        await worker.stop()
        await store.close()


async def test_a_dropped_shards_firings_stop_waiting_for_a_turn(tmp_path: Path) -> None:
    clock = SystemClock()
    store = await SqliteStore.open(tmp_path / "db", ClusterLayout(1, 60_000, clock.now_ms()))
    layout = await store.layout()
    sink = CountingSink(hold_s=30.0)  # the tenant's endpoint hangs
    worker = Worker(
        store,
        sink,
        clock,
        layout,
        WorkerSettings(shutdown_grace_s=0.1),
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
        for key in ("hung", "waiting"):
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        deadline = time.monotonic() + 10
        while not (sink.sent and clock.now_ms() > due + 100):
            assert time.monotonic() < deadline, "nothing was sent"
            await asyncio.sleep(0.02)
        assert worker.load_report("w", 1.0).in_flight == 2  # one sent, one waiting
        await worker.drop_shard(0)
        # Woken at once, not at its next look at the limits (a second later).
        dropped = time.monotonic()
        while worker.load_report("w", 1.0).in_flight != 1:  # the hung delivery goes on
            assert time.monotonic() < dropped + 0.5, "the waiting firing kept waiting"
            await asyncio.sleep(0.02)
        assert len(sink.sent) == 1
    finally:
        await worker.stop()
        await store.close()
