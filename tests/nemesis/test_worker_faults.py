"""Worker nemeses on a real cluster (3 or 2 worker processes, Cassandra, etcd, lease
TTL 4 s): kill -9 a worker, and SIGSTOP a worker past its lease then resume it.

A fault on a worker may duplicate a delivery it had started (at least once); it must
never lose one, nor deliver a cancelled one.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from e2e.cluster import now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import LEASE_TTL, MakeCluster

pytestmark = [
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.nemesis,
    pytest.mark.on_clusters,
]


async def test_kill_9_worker_loses_nothing(make_cluster: MakeCluster, sink: RecordingSink) -> None:
    cluster = await make_cluster(workers=3)
    _, before, _ = await cluster.owners()
    t0 = now_ms()
    workload = Workload(seed=11, target=sink.url, prefix="kill")
    planned = workload.generate(220, t0 + 2_000, t0 + 16_000)
    async with cluster.client() as client:
        await workload.create(client, planned)
        await asyncio.sleep(3)
        window = await cluster.kill_worker(0)
        # Cancel a few recurring schedules while the survivors catch up: nothing of
        # theirs may be delivered afterwards.
        recurring = [p.key for p in planned if p.kind != "once"]
        await workload.cancel(client, random.Random(1).sample(recurring, 3))
    report = await settle(cluster, workload, sink, t0 + 16_000, [window])
    assert_report("kill -9 worker", report, cluster, duplicates=True)
    takeover_s = (window.end_ms - window.start_ms) / 1000
    print(f"takeover {takeover_s:.2f}s")
    assert takeover_s <= LEASE_TTL + 3, takeover_s
    _, after, _ = await cluster.owners()
    # Epochs only grow, and the dead worker's shards have new ones.
    assert all(after[s][1] >= before[s][1] for s in before), (before, after)
    assert any(after[s][1] > before[s][1] for s in before)


async def test_sigstop_past_lease_then_resume(
    make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=2)
    _, before, _ = await cluster.owners()
    t0 = now_ms()
    workload = Workload(seed=12, target=sink.url, prefix="stop")
    planned = workload.generate(200, t0 + 2_000, t0 + 16_000)
    async with cluster.client() as client:
        await workload.create(client, planned)
    await asyncio.sleep(2)
    window = await cluster.pause_worker(0, LEASE_TTL + 3)
    report = await settle(cluster, workload, sink, t0 + 16_000, [window])
    assert_report("SIGSTOP worker past its lease", report, cluster, duplicates=True)
    await cluster.wait_all_owned(2, 20)
    _, after, _ = await cluster.owners()
    assert all(after[s][1] >= before[s][1] for s in before), (before, after)
