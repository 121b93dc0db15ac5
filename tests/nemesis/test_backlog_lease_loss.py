"""A single worker loses its lease while it holds a backlog of thousands of due
firings, then re-registers and re-acquires every shard: the backlog must drain.

Found by the fire benchmark (issue 6): under load a lone worker's keepalive timed out,
its watchdog dropped every shard, it re-acquired them, and then delivered nothing
more for over a minute while thousands of firings were due. Here the lease is lost
on purpose (SIGSTOP past the TTL) in the middle of the backlog.
"""

from __future__ import annotations

import asyncio

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

BACKLOG = 2_000
LEAD_MS = 30_000  # creates run at ~100-150/s on the shared 2-core machine


async def test_a_lone_worker_drains_its_backlog_after_losing_its_lease(
    make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=1)
    workload = Workload(seed=31, target=sink.url, prefix="backlog")
    async with cluster.client() as client:
        t0 = now_ms()
        due = t0 + LEAD_MS
        planned = [workload.make("once", due, due + 1_000) for _ in range(BACKLOG)]
        await workload.create(client, planned)
    assert now_ms() < due, "the preload took longer than the lead time"
    # Due all at once: the worker is still working through them when it is stopped
    # (on a quiet machine it delivers ~1,500/s: 1.5 s after the due time it had
    # delivered all 2,000, so it is stopped 0.4 s after).
    await asyncio.sleep(max(0, due + 400 - now_ms()) / 1000)
    received_before = len(sink.received)
    window = await cluster.pause_worker(0, LEASE_TTL + 2)
    print(f"\n{received_before} of {BACKLOG} delivered when the worker was stopped")
    report = await settle(cluster, workload, sink, now_ms(), [window], timeout_s=120)
    assert_report("lone worker loses its lease mid-backlog", report, cluster, duplicates=True)
    assert received_before < BACKLOG, "the backlog was gone before the fault: no test"
