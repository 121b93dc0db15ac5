"""Network partition between ONE worker and etcd (kernel-level, network namespaces).

Three workers, lease TTL 4 s, on the shared Cassandra and etcd. Worker 2 runs in its
own network namespace (e2e/netns.py): it reaches Cassandra, etcd and the sink at their
usual 127.0.0.1 addresses through a veth pair and NAT. The nemesis adds nftables drop
rules for the etcd port inside that namespace (both ways: packets vanish, connections
are not reset), while Cassandra and the sink stay reachable; later it removes them.

What the design promises, and what is asserted:
- the partitioned worker stops dispatching *before* its lease expires: its keepalives
  go unanswered, and the dispatch gate closes `safety_margin` (1.5 s) before the
  deadline measured from the last answered keepalive's send time; its firings counter
  (read from its /metrics, on the namespace's address) stops growing before etcd
  expires its lease, and does not grow again until the partition heals;
- its shards are taken over by the two others once etcd expires the lease;
- after healing, it registers with a new lease and gets its share of shards back;
- the checker: lost = 0, unexpected = 0 (duplicates are not expected either: nothing
  it dispatched was still in flight when the others took over).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from clockwork_svc.coordination.etcd import cluster_status
from e2e import netns
from e2e.checker import Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import LEASE_TTL
from tests.support.processes import CLOCKWORK, ClockworkProcess

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]

OPS_PORT = 9464


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


class NamespacedProcess(ClockworkProcess):
    """A `clockwork` process started inside a network namespace (same pid)."""

    def __init__(
        self, ns: netns.Namespace, args: list[str], log_path: Path, env: dict[str, str]
    ) -> None:
        super().__init__(args, log_path, env)
        self.ns = ns

    async def start(self) -> NamespacedProcess:
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.ns.command([*CLOCKWORK, *self.args]),
            stdout=log,
            stderr=log,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        return self


@pytest.fixture
def namespace(sink: RecordingSink) -> Iterator[netns.Namespace]:
    cassandra = require_server("CLOCKWORK_CASSANDRA")
    etcd = require_server("CLOCKWORK_ETCD")
    why = netns.available()
    if why is not None:
        if os.environ.get("CI") == "true" or os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
            pytest.fail(f"network namespaces unavailable: {why}")
        pytest.skip(f"network namespaces unavailable: {why}")
    ns = netns.Namespace().create([_port(cassandra), _port(etcd), sink.port])
    try:
        yield ns
    finally:
        ns.destroy()


@pytest.fixture
async def cluster(tmp_path: Path, namespace: netns.Namespace) -> AsyncIterator[Cluster]:
    c = Cluster(
        tmp_path,
        require_server("CLOCKWORK_CASSANDRA"),
        require_server("CLOCKWORK_ETCD"),
        lease_ttl=LEASE_TTL,
    )
    try:
        yield c
    finally:
        await c.stop()  # before the namespace fixture deletes the namespace


@dataclass
class Sample:
    at_ms: int
    fired: float  # the partitioned worker's clockwork_firings_total, all outcomes
    shards: float  # its clockwork_shards_owned
    registered: bool  # its key is in etcd (its lease lives)
    others_own_all: bool  # every shard owned by the other two


async def scrape(http: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as reply:
        text = await reply.text()
    fired = shards = 0.0
    for line in text.splitlines():
        if line.startswith("clockwork_firings_total{"):
            fired += float(line.rsplit(" ", 1)[1])
        elif line.startswith("clockwork_shards_owned "):
            shards = float(line.rsplit(" ", 1)[1])
    return fired, shards


async def worker_id(cluster: Cluster, pid: int, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = await cluster_status(cluster.etcd, cluster.name)
        for wid, info in view.workers.items():
            if info.get("pid") == pid:
                return wid
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no worker with pid {pid} registered")


async def test_partition_one_worker_from_etcd(
    namespace: netns.Namespace, cluster: Cluster, sink: RecordingSink
) -> None:
    etcd_port = _port(cluster.etcd)
    await cluster.start(workers=2)
    inside = await NamespacedProcess(
        namespace,
        cluster.worker_args(f"{namespace.ns_ip}:{OPS_PORT}"),
        cluster.log_path("worker2-netns.log"),
        cluster.env,
    ).start()
    cluster.workers.append(inside)
    await cluster.wait_all_owned(3, 60)
    assert inside.proc is not None
    me = await worker_id(cluster, inside.proc.pid)
    metrics_url = f"http://{namespace.ns_ip}:{OPS_PORT}/metrics"

    t0 = now_ms()
    end = t0 + 26_000
    workload = Workload(seed=41, target=sink.url, prefix="partition")
    planned = workload.generate(260, t0 + 2_000, end)
    async with cluster.client() as client:
        await workload.create(client, planned)

    samples: list[Sample] = []

    async def sample(http: aiohttp.ClientSession) -> Sample:
        fired, shards = await scrape(http, metrics_url)
        count, owners, workers = await cluster.owners()
        others = len(owners) == count == cluster.shards and all(o != me for o, _ in owners.values())
        s = Sample(now_ms(), fired, shards, me in workers, others)
        samples.append(s)
        return s

    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(max(0, t0 + 4_000 - now_ms()) / 1000)
        before = await sample(http)
        assert before.registered and before.shards > 0 and before.fired > 0, before
        cut_ms = now_ms()
        namespace.cut(etcd_port)
        try:
            # Until the others own everything, then 3 s more of partition.
            while not (await sample(http)).others_own_all:
                assert now_ms() - cut_ms < 30_000, samples[-5:]
                await asyncio.sleep(0.05)
            takeover_ms = now_ms()
            while now_ms() - takeover_ms < 3_000:
                await sample(http)
                await asyncio.sleep(0.1)
        finally:
            namespace.heal()
        heal_ms = now_ms()
        # Rejoin: registered again and owning shards.
        while True:
            s = await sample(http)
            if s.registered and s.shards > 0:
                break
            assert now_ms() - heal_ms < 30_000, samples[-5:]
            await asyncio.sleep(0.1)
        rejoin_ms = now_ms()
        await cluster.wait_all_owned(3, 30)

    window = Window("partition worker2/etcd", cut_ms, rejoin_ms)
    report = await settle(cluster, workload, sink, end, [window])
    async with aiohttp.ClientSession() as http:
        fired_at_end, _ = await scrape(http, metrics_url)

    during = [s for s in samples if cut_ms <= s.at_ms < heal_ms]
    expired_ms = next(s.at_ms for s in during if not s.registered)
    last_growth_ms = max(
        (b.at_ms for a, b in itertools.pairwise(during) if b.fired > a.fired),
        default=cut_ms,
    )
    after_expiry = [s.fired for s in during if s.at_ms >= expired_ms]
    dropped_ms = next((s.at_ms for s in during if s.shards == 0), None)
    log = inside.log()
    figures = report.figures()
    print(
        f"\npartition: gate closed (last delivery by the partitioned worker) "
        f"{(last_growth_ms - cut_ms) / 1000:.2f}s after the cut; its scanners stopped "
        f"{((dropped_ms or 0) - cut_ms) / 1000:.2f}s; lease expired in etcd "
        f"{(expired_ms - cut_ms) / 1000:.2f}s; takeover {(takeover_ms - cut_ms) / 1000:.2f}s "
        f"after the cut ({(takeover_ms - expired_ms) / 1000:.2f}s after expiry); rejoin "
        f"{(rejoin_ms - heal_ms) / 1000:.2f}s after healing; lost {figures['lost']}, "
        f"duplicated {figures['duplicated']}, lag p50/p99/max "
        f"{figures['lag_p50_ms']}/{figures['lag_p99_ms']}/{figures['lag_max_ms']} ms"
    )
    assert_report("partition one worker from etcd", report, cluster, duplicates=False)
    # It stopped dispatching before its lease expired, and not again while partitioned.
    assert last_growth_ms < expired_ms, (last_growth_ms, expired_ms)
    assert len(set(after_expiry)) == 1, after_expiry
    assert "coordination:" in log and "dropping all shards" in log, log[-3000:]
    # After healing it delivers again (its share of the firings due after the rejoin).
    assert fired_at_end > after_expiry[-1], (fired_at_end, after_expiry[-1])
