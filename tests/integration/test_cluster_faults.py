"""A real cluster under faults: `clockwork api` and several `clockwork worker` processes
on a real Cassandra and a real etcd, delivering to a recording sink.

Every test checks with e2e/checker.py (re-exported by tests/support/checker.py):
lost = 0 and unexpected = 0 always; duplicates = 0 where no fault can cause one. The
nemeses (kill -9 and SIGSTOP of a worker, api, etcd and Cassandra restarts, sink
outages) are in tests/nemesis/.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.coordination.etcd import cluster_status
from clockwork_svc.domain import identity, triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from tests.conftest import require_server
from tests.support.checker import CheckResult, check
from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving
from tests.support.sink import RecordingSink

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

SHARDS = 16
TTL = 4


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Cluster:
    def __init__(self, tmp: Path, cassandra: str, etcd: str) -> None:
        self.tmp = tmp
        self.keyspace = "faults_" + uuid.uuid4().hex[:10]
        self.name = "c" + uuid.uuid4().hex[:8]
        self.env = {
            "CLOCKWORK_CASSANDRA": cassandra,
            "CLOCKWORK_KEYSPACE": self.keyspace,
            "CLOCKWORK_ETCD": etcd,
            "CLOCKWORK_CLUSTER": self.name,
            "CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT": "30",
        }
        self.api: ClockworkProcess | None = None
        self.api_address = ""
        self.workers: list[ClockworkProcess] = []

    async def start(self, workers: int) -> None:
        code, _, err = await run_cli(
            "schema", "migrate", "--replication-factor", "1", "--shards", str(SHARDS), env=self.env
        )
        assert code == 0, err
        port = free_port()
        self.api_address = f"127.0.0.1:{port}"
        self.api = await ClockworkProcess(
            [
                "api",
                "--listen",
                self.api_address,
                "--ops-listen",
                "127.0.0.1:0",
                "--allow-private-targets",
                "127.0.0.0/8",
            ],
            self.tmp / "api.log",
            self.env,
        ).start()
        await wait_serving(self.api_address)
        for _ in range(workers):
            await self.add_worker()

    async def add_worker(self) -> ClockworkProcess:
        n = len(self.workers)
        proc = await ClockworkProcess(
            [
                "worker",
                "--lease-ttl",
                str(TTL),
                "--allow-private-targets",
                "127.0.0.0/8",
                "--ops-listen",
                "127.0.0.1:0",
            ],
            self.tmp / f"worker{n}.log",
            self.env,
        ).start()
        self.workers.append(proc)
        return proc

    async def status(self) -> dict[str, object]:
        """The cluster view, read from etcd in this process (polling through the CLI would
        add a Python start-up, about a second on a loaded machine, to every measurement)."""
        view = await cluster_status(self.env["CLOCKWORK_ETCD"], self.name)
        shards: dict[str, dict[str, int]] = {w: {} for w in view.workers}
        for shard, (owner, epoch) in view.owners.items():
            shards.setdefault(owner, {})[str(shard)] = epoch
        return {
            "shard_count": view.shard_count,
            "workers": [
                {"id": w, "live": w in view.workers, "shards": s} for w, s in shards.items()
            ],
            "unowned": sorted(set(range(view.shard_count or 0)) - set(view.owners)),
        }

    async def cli_status(self) -> dict[str, object]:
        code, out, err = await run_cli("cluster", "status", "--json", env=self.env)
        assert code == 0, err
        result: dict[str, object] = json.loads(out)
        return result

    async def wait_all_owned(self, live_workers: int, timeout_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            status = await self.status()
            workers = [w for w in status["workers"] if w["live"]]  # type: ignore[attr-defined]
            if (
                status["unowned"] == []
                and len(workers) == live_workers
                and status["shard_count"] == SHARDS
            ):
                return time.monotonic() - started
            await asyncio.sleep(0.05)
        raise AssertionError(f"shards not all owned by {live_workers} workers: {status}")

    def client(self) -> ClockworkClient:
        return ClockworkClient(ClientSettings(self.api_address, tenant="faults"))

    async def stop(self) -> None:
        for proc in [*self.workers, *([self.api] if self.api else [])]:
            if proc.proc is not None and proc.proc.returncode is None:
                try:
                    proc.proc.send_signal(signal.SIGCONT)
                    await proc.kill(signal.SIGTERM)
                except (ProcessLookupError, TimeoutError):
                    await proc.kill(signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.log()[-3000:]}" for p in self.workers)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, require_server("CLOCKWORK_CASSANDRA"), require_server("CLOCKWORK_ETCD"))
    try:
        yield c
    finally:
        await c.stop()


async def schedule_one_shots(
    cluster: Cluster, sink: RecordingSink, count: int, first_in_ms: int, spread_ms: int
) -> dict[str, int]:
    """Create one-shots spread over a window; returns delivery id -> due time."""
    base = now_ms() + first_in_ms
    expected: dict[str, int] = {}
    async with cluster.client() as client:
        entries = []
        for i in range(count):
            due = base + (i * spread_ms) // count
            spec = ScheduleSpec(triggers.OnceTrigger(due), HttpTarget(f"{sink.url}/f/{i}"))
            entries.append((f"once-{i}", spec, due))
        for chunk in range(0, count, 200):
            part = entries[chunk : chunk + 200]
            reply = await client.create_many([(k, s) for k, s, _ in part])
            for (_, _, due), result in zip(part, reply.results, strict=True):
                assert result.code == 0, result.message
                schedule_id = result.response.schedule.id
                expected[identity.delivery_id(schedule_id, due)] = due
    return expected


def epochs(status: dict[str, object]) -> dict[str, int]:
    """Shard -> epoch, from `clockwork cluster status --json`."""
    workers = status["workers"]
    assert isinstance(workers, list)
    return {s: e for w in workers for s, e in w["shards"].items()}


async def settle(sink: RecordingSink, expected: dict[str, int], timeout_s: float) -> CheckResult:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check(expected, sink.received)
        if not result.lost:
            break
        await asyncio.sleep(0.25)
    await asyncio.sleep(1.0)  # let stragglers (duplicates) arrive before judging
    return check(expected, sink.received)


async def test_no_faults_no_loss_no_duplicates(cluster: Cluster, sink: RecordingSink) -> None:
    await cluster.start(workers=3)
    await cluster.wait_all_owned(3, 30)
    # The CLI shows the same view as the test's own reads.
    via_cli = await cluster.cli_status()
    assert via_cli["unowned"] == [] and via_cli["shard_count"] == SHARDS
    assert sum(len(w["shards"]) for w in via_cli["workers"]) == SHARDS  # type: ignore[attr-defined,misc]
    expected = await schedule_one_shots(cluster, sink, 300, 3000, 6000)
    result = await settle(sink, expected, 40)
    print("no faults:", result.summary())
    assert result.lost == [] and result.unexpected == [], cluster.logs()
    assert result.duplicated == {}


async def test_joining_worker_gets_a_fair_share_without_gaps(
    cluster: Cluster, sink: RecordingSink
) -> None:
    await cluster.start(workers=3)
    await cluster.wait_all_owned(3, 30)
    expected = await schedule_one_shots(cluster, sink, 300, 2000, 10_000)
    await asyncio.sleep(3)
    started = time.monotonic()
    await cluster.add_worker()
    await cluster.wait_all_owned(4, 30)
    while True:
        status = await cluster.status()
        counts = sorted(len(w["shards"]) for w in status["workers"])  # type: ignore[attr-defined]
        if counts == [4, 4, 4, 4] or time.monotonic() - started > 30:
            break
        await asyncio.sleep(0.2)
    rebalance = time.monotonic() - started
    result = await settle(sink, expected, 40)
    print(f"join: rebalance {rebalance:.2f}s;", result.summary())
    assert counts == [4, 4, 4, 4]
    assert result.lost == [] and result.unexpected == [], cluster.logs()
    assert result.duplicated == {}
