"""The worker survives store errors on every path a firing takes before delivery.

Found by the Cassandra restart nemesis: a tenant lookup that failed while the store was
down (the tenant cache had expired) raised out of the fire loop, which ended silently,
so the worker scanned on but never fired again. The firing must be retried instead."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec
from clockwork_svc.domain.tenant import TenantLimits
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.unit.worker.fakes import FixedTenants
from tests.unit.worker.fakes import RecordingSink as Sink


class FlakyTenants(FixedTenants):
    """A tenant source whose first `failures` limit lookups find the store down."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def limits(self, tenant: str) -> TenantLimits:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("cassandra: NoHostAvailable (injected)")
        return await super().limits(tenant)


async def test_a_failed_tenant_lookup_delays_the_firing_instead_of_killing_the_worker(
    tmp_path: Path,
) -> None:
    clock = SystemClock()
    store = await SqliteStore.open(tmp_path / "db", ClusterLayout(2, 60_000, clock.now_ms()))
    layout = await store.layout()
    sink, tenants = Sink(), FlakyTenants(failures=2)
    settings = WorkerSettings(
        scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200),
        store_retry_delay_s=0.1,
    )
    worker = Worker(store, sink, clock, layout, settings, Metrics(), tenants=tenants)
    worker.start()
    for shard in range(layout.shard_count):
        worker.add_shard(shard, clock.now_ms())
    scheduling = Scheduling(
        store, clock, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    try:
        due = clock.now_ms() + 300
        for key in ("a", "b"):
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        deadline = time.monotonic() + 10
        while sorted(sink.delivered) != ["a", "b"]:
            assert time.monotonic() < deadline, f"delivered only {sink.delivered}"
            await asyncio.sleep(0.05)
        assert tenants.failures == 0  # both injected failures were hit
        assert worker.alive
        # and the worker still fires afterwards
        spec = ScheduleSpec(
            triggers.OnceTrigger(clock.now_ms() + 200), HttpTarget("http://127.0.0.1:9/x")
        )
        await scheduling.create("acme", "c", spec)
        while "c" not in sink.delivered:
            assert time.monotonic() < deadline, f"delivered only {sink.delivered}"
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
        await store.close()
