"""A slow Cassandra (its process runs 20 ms of every 200 ms: SIGSTOP/SIGCONT, as a
CPU-throttled node) while firings are due and a burst of creates arrives: the api
fills its in-flight limit with the slow calls and refuses the others at once with a
retry hint instead of piling them up; every call ends cleanly (OK, hinted
UNAVAILABLE, or the store's own UNAVAILABLE / the client's DEADLINE_EXCEEDED for a
call that outlived its deadline; never CANCELLED, UNKNOWN or INTERNAL); a refused
create did nothing; and once the node runs at full speed again every due firing is
delivered (lost 0). The test runs its own Cassandra node (a tmp state dir)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.errors import NotFound
from clockwork_svc.server.admission import PUSHBACK_METADATA
from clockwork_svc.server.auth import TENANT_METADATA
from e2e.checker import Window
from e2e.cluster import now_ms, settle
from e2e.infra import Running
from e2e.infra import cassandra as cassandra_server
from e2e.overload import throttle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import MakeCluster

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]

MAX_IN_FLIGHT = 16
SLOW_S = 12.0


@pytest.fixture
def own_cassandra(tmp_path: Path) -> Iterator[Running]:
    require_server("CLOCKWORK_CASSANDRA")
    node = cassandra_server.start(tmp_path / "infra")
    try:
        yield node
    finally:
        node.destroy()


async def test_a_slow_cassandra_slows_the_api_and_workers_and_loses_nothing(
    own_cassandra: Running, make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=1, cassandra=own_cassandra.address, shards=8)
    await cluster.kill_api()
    cluster.env["CLOCKWORK_MAX_IN_FLIGHT"] = str(MAX_IN_FLIGHT)
    await cluster.start_api()
    t0 = now_ms()
    workload = Workload(seed=53, target=sink.url, prefix="slow")
    planned = workload.generate(150, t0 + 3_000, t0 + 25_000)
    async with cluster.client() as client:
        await workload.create(client, planned)

    spec = convert.spec_to_pb(
        ScheduleSpec(triggers.OnceTrigger(t0 + 86_400_000), HttpTarget(sink.url + "/later"))
    )
    own = [("grpc.use_local_subchannel_pool", 1)]  # four connections, not one shared
    channels = [grpc.aio.insecure_channel(cluster.api_address, own) for _ in range(4)]
    stubs = [pb_grpc.SchedulerServiceStub(c) for c in channels]
    metadata = ((TENANT_METADATA, cluster.tenant),)
    codes: collections.Counter[str] = collections.Counter()
    refused: list[str] = []
    refused_ms: list[float] = []

    async def create(i: int) -> None:
        await asyncio.sleep(i * 0.02)  # 400 creates spread over the slow phase
        key = f"burst-{i}"
        started = time.monotonic()
        try:
            request = pb.CreateScheduleRequest(key=key, spec=spec)
            await stubs[i % 4].CreateSchedule(request, metadata=metadata, timeout=8)
            codes["OK"] += 1
        except grpc.aio.AioRpcError as exc:
            hinted = PUSHBACK_METADATA in dict(exc.trailing_metadata() or ())
            codes[exc.code().name + (" (hinted)" if hinted else "")] += 1
            if hinted:
                refused.append(key)
                refused_ms.append((time.monotonic() - started) * 1000)

    start = now_ms()
    try:
        await asyncio.gather(throttle(own_cassandra.pid, SLOW_S), *(create(i) for i in range(400)))
    finally:
        for channel in channels:
            await channel.close()
    window = Window("Cassandra at 10% speed", start, now_ms())
    refused_ms.sort()
    print(f"answers while slow: {dict(codes)}")
    if refused_ms:
        print(
            f"refusals: p50 {refused_ms[len(refused_ms) // 2]:.0f} ms, max {refused_ms[-1]:.0f} ms"
        )
    allowed = {"OK", "UNAVAILABLE (hinted)", "UNAVAILABLE", "DEADLINE_EXCEEDED"}
    assert set(codes) <= allowed, codes
    assert codes["UNAVAILABLE (hinted)"] > 0, codes  # the slow calls filled the limit
    async with cluster.client() as client:
        for key in refused:
            with pytest.raises(NotFound):
                await client.get(key)

    report = await settle(cluster, workload, sink, t0 + 25_000, [window], timeout_s=90)
    assert_report("slow cassandra", report, cluster, duplicates=True)
