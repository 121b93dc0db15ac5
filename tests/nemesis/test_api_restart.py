"""kill -9 the api during a batch create and restart it; the client retries with the same
keys. Creates are idempotent per key, so nothing is duplicated and nothing is lost."""

from __future__ import annotations

import asyncio

import pytest

from e2e.checker import Window
from e2e.cluster import now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import MakeCluster

pytestmark = [
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.nemesis,
    pytest.mark.on_clusters,
]


async def test_kill_9_api_during_batch_create(
    make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=2)
    t0 = now_ms()
    workload = Workload(seed=21, target=sink.url, prefix="api")
    planned = workload.generate(300, t0 + 12_000, t0 + 24_000)
    async with cluster.client(timeout_s=60) as client:
        creating = asyncio.create_task(workload.create(client, planned, batch=20))
        # Let a few batches land, then crash the api in the middle of the stream.
        while len(workload.created) < 40:  # noqa: ASYNC110 - another task's progress
            await asyncio.sleep(0.01)
        start = now_ms()
        await cluster.kill_api()
        acked_at_kill = len(workload.created)
        await asyncio.sleep(1.0)
        await cluster.start_api()
        window = Window("kill -9 api + restart", start, now_ms())
        retried = await asyncio.wait_for(creating, 90)
    print(f"acked before the kill: {acked_at_kill}; retried calls (client loop): {retried}")
    assert acked_at_kill < len(planned), "the kill came after the last batch"
    assert len(workload.created) == len(planned)
    report = await settle(cluster, workload, sink, t0 + 24_000, [window])
    assert_report("kill -9 api during batch create", report, cluster, duplicates=False)
    # Every schedule exists once: the retried keys did not make second schedules.
    async with cluster.client() as client:
        keys = [s.key async for s in client.list_all()]
    assert sorted(keys) == sorted(p.key for p in planned)
