"""A firing popped while dispatch is briefly not allowed must still be delivered.

Found while chasing a stall in the fire benchmark (issue 6): with a backlog of due
firings, a lease deadline that passed for a moment (a keepalive answered late on a
loaded machine, then answered after all, so no shard was dropped and nothing was
logged) made the fire loop discard every due firing it popped in that moment. The
scanner still held them as pending, so it never admitted them again and its cursor
stayed behind them: they were not delivered until the shard changed owner.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.unit.worker.fakes import RecordingSink as Sink


class Gate:
    """`may_dispatch`: closed while `closed` is set, and counts the refusals."""

    def __init__(self) -> None:
        self.closed = False
        self.refused = 0

    def __call__(self) -> bool:
        if self.closed:
            self.refused += 1
        return not self.closed


async def test_firings_popped_while_dispatch_is_paused_are_delivered_once_it_resumes(
    tmp_path: Path,
) -> None:
    clock = SystemClock()
    store = await SqliteStore.open(tmp_path / "db", ClusterLayout(2, 60_000, clock.now_ms()))
    layout = await store.layout()
    sink, gate = Sink(), Gate()
    settings = WorkerSettings(
        scan=ScanSettings(poll_interval_ms=50, sweep_interval_ms=200, cursor_interval_ms=200),
        store_retry_delay_s=0.1,
    )
    worker = Worker(store, sink, clock, layout, settings, Metrics(), may_dispatch=gate)
    worker.start()
    for shard in range(layout.shard_count):
        worker.add_shard(shard, clock.now_ms())
    scheduling = Scheduling(
        store, clock, layout, Limits(), AddressPolicy(allow_loopback=True), worker.offer
    )
    keys = [f"k{i}" for i in range(20)]
    try:
        gate.closed = True  # the lease deadline passed a moment ago...
        due = clock.now_ms() + 200
        for key in keys:
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"))
            await scheduling.create("acme", key, spec)
        deadline = time.monotonic() + 10
        while gate.refused < len(keys):  # ...while the firings came due
            assert time.monotonic() < deadline, f"only {gate.refused} refused"
            await asyncio.sleep(0.02)
        assert sink.delivered == []
        gate.closed = False  # ...and the keepalive's answer arrived: the shards stay ours
        while sorted(sink.delivered) != sorted(keys):
            assert time.monotonic() < deadline, f"delivered only {sorted(sink.delivered)}"
            await asyncio.sleep(0.05)
        assert worker.owned_shards.keys() == set(range(layout.shard_count))
    finally:
        await worker.stop()
        await store.close()
