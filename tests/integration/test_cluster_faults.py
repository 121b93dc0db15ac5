"""A real cluster under faults: `clockwork api` and several `clockwork worker` processes
on a real Cassandra and a real etcd, delivering to a recording sink.

Every test creates its schedules with e2e/workload.py and judges with e2e.cluster.settle
(e2e/checker.py):
lost = 0 and unexpected = 0 always; duplicates = 0 where no fault can cause one. The
nemeses (kill -9 and SIGSTOP of a worker, api, etcd and Cassandra restarts, sink
outages) are in tests/nemesis/.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from e2e.cluster import Cluster, now_ms, settle
from e2e.workload import Workload
from tests.conftest import require_stores
from tests.support.processes import run_cli
from tests.support.sink import RecordingSink

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

SHARDS = 16
TTL = 4


async def shards_per_worker(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Live worker -> {shard: epoch}, read from etcd in this process (polling through the
    CLI would add a Python start-up, about a second on a loaded machine, to every read)."""
    _, owners, workers = await cluster.owners()
    shards: dict[str, dict[str, int]] = {w: {} for w in workers}
    for shard, (owner, epoch) in owners.items():
        shards.setdefault(owner, {})[str(shard)] = epoch
    return shards


async def cli_status(cluster: Cluster) -> dict[str, object]:
    code, out, err = await run_cli("cluster", "status", "--json", env=cluster.env)
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


async def wait_even_spread(cluster: Cluster, workers: int, timeout_s: float) -> list[int]:
    """Wait until `workers` live workers own SHARDS / workers shards each; returns the
    sorted shard counts last read. etcd answering slowly on a loaded machine (a read
    that times out) is retried until the deadline, as an operator's poll would be."""
    deadline = time.monotonic() + timeout_s
    even = [SHARDS // workers] * workers
    counts: list[int] = []
    while time.monotonic() < deadline:
        try:
            counts = sorted(len(s) for s in (await shards_per_worker(cluster)).values())
        except Exception as exc:  # noqa: BLE001 - etcd slow to answer on a busy machine
            print(f"etcd status not read yet: {exc}")
        if counts == even:
            break
        await asyncio.sleep(0.2)
    return counts


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(
        tmp_path,
        *require_stores(),
        shards=SHARDS,
        lease_ttl=TTL,
    )
    try:
        yield c
    finally:
        await c.stop()


async def test_no_faults_no_loss_no_duplicates(cluster: Cluster, sink: RecordingSink) -> None:
    await cluster.start(workers=3, timeout_s=30)
    # The CLI shows the same view as the test's own reads.
    via_cli = await cli_status(cluster)
    assert via_cli["unowned"] == [] and via_cli["shard_count"] == SHARDS
    assert sum(len(w["shards"]) for w in via_cli["workers"]) == SHARDS  # type: ignore[attr-defined,misc]
    t0 = now_ms()
    workload = Workload(seed=21, target=sink.url, prefix="nofault")
    async with cluster.client() as client:
        await workload.create(client, workload.generate(300, t0 + 3_000, t0 + 9_000, ["once"]))
    report = await settle(cluster, workload, sink, t0 + 9_000, timeout_s=40)
    print("no faults:", report.figures())
    assert report.lost == [] and report.unexpected == [], cluster.logs()
    assert report.duplicated == {}
    # Each process exempted its start-up heap from the collector (gc_policy.py).
    assert cluster.api is not None
    for proc in [*cluster.workers, cluster.api]:
        assert "start-up objects frozen" in proc.log(), proc.log()[-2000:]


async def test_joining_worker_gets_a_fair_share_without_gaps(
    cluster: Cluster, sink: RecordingSink
) -> None:
    await cluster.start(workers=3, timeout_s=30)
    t0 = now_ms()
    workload = Workload(seed=22, target=sink.url, prefix="join")
    async with cluster.client() as client:
        await workload.create(client, workload.generate(300, t0 + 2_000, t0 + 12_000, ["once"]))
    await asyncio.sleep(3)
    started = time.monotonic()
    await cluster.add_worker()
    await cluster.wait_all_owned(4, 30)
    counts = await wait_even_spread(cluster, 4, 30 - (time.monotonic() - started))
    rebalance = time.monotonic() - started
    report = await settle(cluster, workload, sink, t0 + 12_000, timeout_s=40)
    print(f"join: rebalance {rebalance:.2f}s;", report.figures())
    assert counts == [4, 4, 4, 4]
    assert report.lost == [] and report.unexpected == [], cluster.logs()
    assert report.duplicated == {}
