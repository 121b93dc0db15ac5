"""Restart the coordinator's etcd (kill -9, then the harness restarts the same member
with its data): workers stop dispatching when their keepalives fail and take their
shards back when etcd returns. The test runs its own etcd (a tmp state dir), so the
shared one is not disturbed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.checker import Window
from e2e.cluster import now_ms, settle
from e2e.infra import Running
from e2e.infra import etcd as etcd_server
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import MakeCluster

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[Running]:
    require_server("CLOCKWORK_ETCD")  # the harness built it; skip/fail like the others
    member = etcd_server.start(tmp_path / "infra")
    try:
        yield member
    finally:
        member.destroy()


async def test_etcd_kill_9_and_restart(
    own_etcd: Running, make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=2, etcd=own_etcd.address)
    t0 = now_ms()
    workload = Workload(seed=31, target=sink.url, prefix="etcd")
    planned = workload.generate(250, t0 + 2_000, t0 + 18_000)
    async with cluster.client() as client:
        await workload.create(client, planned)
    await asyncio.sleep(3)
    start = now_ms()
    await asyncio.to_thread(own_etcd.kill)
    await asyncio.sleep(2.0)
    await asyncio.to_thread(own_etcd.restart)
    await cluster.wait_all_owned(2, 30)
    window = Window("kill -9 etcd + restart", start, now_ms())
    report = await settle(cluster, workload, sink, t0 + 18_000, [window])
    assert_report("etcd restart", report, cluster, duplicates=True)
