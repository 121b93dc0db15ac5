"""Restart Cassandra (kill -9, then the harness restarts the same node with its data):
the api and the workers ride out the outage (the driver reconnects; the worker keeps
firings in memory and retries them), and every acknowledged write survives, since the
node syncs its commit log before acknowledging. The test runs its own node (a tmp
state dir): start-up takes 10-20 s.

This nemesis found a bug: a tenant lookup failing during the outage ended the worker's
fire loop silently (it scanned on, fired nothing). Regression test:
tests/unit/worker/test_worker_store_outage.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.checker import Window
from e2e.cluster import now_ms, settle
from e2e.infra import Running
from e2e.infra import cassandra as cassandra_server
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import MakeCluster

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]


@pytest.fixture
def own_cassandra(tmp_path: Path) -> Iterator[Running]:
    require_server("CLOCKWORK_CASSANDRA")  # the harness fetched it; skip/fail like the others
    node = cassandra_server.start(tmp_path / "infra")
    try:
        yield node
    finally:
        node.destroy()


async def test_cassandra_kill_9_and_restart(
    own_cassandra: Running, make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=2, cassandra=own_cassandra.address, shards=8)
    t0 = now_ms()
    workload = Workload(seed=41, target=sink.url, prefix="cass")
    planned = workload.generate(250, t0 + 2_000, t0 + 30_000)
    async with cluster.client() as client:
        await workload.create(client, planned)
    await asyncio.sleep(4)
    start = now_ms()
    await asyncio.to_thread(own_cassandra.kill)
    await asyncio.to_thread(own_cassandra.restart)
    window = Window("kill -9 cassandra + restart", start, now_ms())
    print(f"cassandra down for {(window.end_ms - window.start_ms) / 1000:.1f}s")
    report = await settle(cluster, workload, sink, t0 + 30_000, [window], timeout_s=90)
    assert_report("cassandra restart", report, cluster, duplicates=True)
