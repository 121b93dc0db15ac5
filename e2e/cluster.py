"""A real Clockwork cluster for fault tests, the soak and the benchmarks: one
`clockwork api` and several `clockwork worker` processes on a fresh keyspace, sharing
shards through etcd, each a child process logging to the run's directory.

The nemeses that act on Clockwork's own processes live here too (kill -9 or SIGSTOP a
worker, kill -9 and restart the api); each returns the fault's window for the checker.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.coordination.assignment import fair_target
from clockwork_svc.coordination.etcd import cluster_status
from clockwork_svc.storage.cassandra import drop_keyspace_for_tests
from clockwork_svc.storage.cassandra.connecting import parse_contact_point
from e2e.checker import Report, Window, collect_outcomes, judge
from e2e.infra.cassandra_cluster import unsettled
from e2e.infra.cassandra_secure import SUPERUSER
from e2e.sink import RecordingSink
from e2e.stores import CassandraAccess, EtcdAccess
from e2e.workload import Workload
from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving

TENANT = "faults"
# How long teardown waits for a replicated Cassandra to settle before dropping a keyspace.
SETTLE_TIMEOUT_S = 120.0
# Log levels that mark a fault Clockwork's code did not expect: it logs every fault it
# handles (a store unavailable, a fenced shard, a failed delivery) at WARNING or below.
FAULT_LEVELS = frozenset({"error", "critical"})


class UnexpectedFaults(AssertionError):
    """A process of the cluster logged a fault Clockwork's code did not expect."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Cluster:
    def __init__(
        self,
        run_dir: Path,
        cassandra: str | CassandraAccess,
        etcd: str | EtcdAccess,
        shards: int = 16,
        lease_ttl: int = 4,
        log_level: str = "INFO",
        *,
        keyspace_prefix: str = "faults_",
        worker_flags: Sequence[str] = (),
        tenant: str = TENANT,
        replication_factor: int | None = None,
    ) -> None:
        """`cassandra`, `etcd`: the stores (a string: addresses, comma-separated, in
        plain text; an access: with its TLS and login too); `worker_flags`: more
        `clockwork worker` arguments; `tenant`: the tenant `client()` acts as;
        `replication_factor`: the keyspace's (default: 3 on a cluster of three or more
        contact points, else as many as there are)."""
        self.run_dir = run_dir
        self.shards = shards
        self.lease_ttl = lease_ttl
        self.worker_flags = list(worker_flags)
        self.tenant = tenant
        self.cassandra = CassandraAccess.of(cassandra)
        self.etcd_access = EtcdAccess.of(etcd)
        self.replication_factor = replication_factor or min(3, len(self.cassandra.contact_points))
        self.keyspace = keyspace_prefix + uuid.uuid4().hex[:10]
        self.name = "c" + uuid.uuid4().hex[:8]
        self.etcd = self.etcd_access.endpoints
        self.env = {
            **self.cassandra.env(),
            **self.etcd_access.env(),
            "CLOCKWORK_KEYSPACE": self.keyspace,
            "CLOCKWORK_CLUSTER": self.name,
            "CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT": "60",
            "CLOCKWORK_LOG_LEVEL": log_level,
        }
        self.api: ClockworkProcess | None = None
        self.api_address = f"127.0.0.1:{free_port()}"
        # The first api's /metrics (a monitor scrapes it); other processes pick a port.
        self.api_ops_address = f"127.0.0.1:{free_port()}"
        self.workers: list[ClockworkProcess] = []
        self.other_apis: list[ClockworkProcess] = []
        self._api_starts = 0
        self._log_paths: set[Path] = set()

    async def start(self, workers: int, timeout_s: float = 60.0) -> None:
        await self.migrate()
        await self.start_api()
        await self.start_workers(workers, timeout_s)

    async def migrate(self) -> None:
        """Create the cluster's keyspace with its shard count."""
        code, _, err = await run_cli(
            "schema",
            "migrate",
            "--replication-factor",
            str(self.replication_factor),
            "--shards",
            str(self.shards),
            env=self.env,
            # The schema must agree on every node: several seconds on a three-node
            # cluster sharing two cores, more while a nemesis has one node down.
            timeout_s=60 * self.replication_factor,
        )
        if code != 0:
            raise RuntimeError(f"schema migrate failed: {err}")

    async def start_api(self, wait: bool = True) -> ClockworkProcess:
        """Start the api on its fixed addresses (a restart keeps them, as a Service would)."""
        self.api = await self._api_process(self.api_address, wait, self.api_ops_address)
        return self.api

    async def add_api(self) -> str:
        """Start one more api, on an address of its own (returned): several replicas
        behind one Service."""
        address = f"127.0.0.1:{free_port()}"
        self.other_apis.append(await self._api_process(address, wait=True))
        return address

    async def _api_process(
        self, address: str, wait: bool, ops_address: str = "127.0.0.1:0"
    ) -> ClockworkProcess:
        self._api_starts += 1
        api = await ClockworkProcess(
            [
                "api",
                "--listen",
                address,
                "--ops-listen",
                ops_address,
                "--allow-private-targets",
                "127.0.0.0/8",
            ],
            self.log_path(f"api{self._api_starts}.log"),
            self.env,
        ).start()
        if wait:
            await wait_serving(address)
        return api

    def log_path(self, name: str) -> Path:
        """`name` in the run's directory, among the logs `unexpected_faults` reads (a
        test that starts a worker its own way logs it here)."""
        path = self.run_dir / name
        self._log_paths.add(path)
        return path

    def worker_args(self, ops_listen: str = "127.0.0.1:0") -> list[str]:
        """`clockwork worker` arguments for this cluster (tests that start a worker their
        own way, under libfaketime or in a network namespace, use them too)."""
        return [
            "worker",
            "--lease-ttl",
            str(self.lease_ttl),
            "--allow-private-targets",
            "127.0.0.0/8",
            "--ops-listen",
            ops_listen,
            *self.worker_flags,
        ]

    async def add_worker(
        self, etcd: str | None = None, ops_listen: str = "127.0.0.1:0"
    ) -> ClockworkProcess:
        """`etcd`: this worker's own etcd endpoints (default: the cluster's);
        `ops_listen`: its /metrics address (default: a free port)."""
        n = len(self.workers)
        env = self.env if etcd is None else {**self.env, "CLOCKWORK_ETCD": etcd}
        proc = await ClockworkProcess(
            self.worker_args(ops_listen), self.log_path(f"worker{n}.log"), env
        ).start()
        self.workers.append(proc)
        return proc

    async def start_workers(self, count: int, timeout_s: float = 90.0) -> None:
        """Add `count` workers and wait until the live ones own every shard."""
        for _ in range(count):
            await self.add_worker()
        await self.wait_all_owned(len(self.live_workers()), timeout_s)

    async def stop_workers(self) -> None:
        await _terminate(self.workers)
        self.workers = []

    def live_workers(self) -> list[ClockworkProcess]:
        return [w for w in self.workers if w.proc is not None and w.proc.returncode is None]

    async def owners(self) -> tuple[int, dict[int, tuple[str, int]], set[str]]:
        """(shard count, shard -> (owner, epoch), live worker ids) as etcd has them."""
        view = await cluster_status(self.etcd, self.name, self.etcd_access.security)
        return view.shard_count or 0, dict(view.owners), set(view.workers)

    async def wait_all_owned(
        self, live_workers: int, timeout_s: float, balanced: bool = False
    ) -> float:
        """Wait until every shard is owned and exactly `live_workers` are registered.

        `balanced`: also until each worker owns its fair share, so no rebalancing
        handoff is still to come.
        """
        started = time.monotonic()
        last: object = None
        while time.monotonic() - started < timeout_s:
            try:
                count, owners, workers = await self.owners()
            except Exception as exc:  # noqa: BLE001 - etcd restarting or slow
                last = exc
            else:
                held = Counter(owner for owner, _ in owners.values())
                last = (count, len(owners), len(workers), dict(held))
                full = count == self.shards and len(owners) == self.shards
                fair = not balanced or all(
                    held[w] == fair_target(w, sorted(workers), self.shards) for w in workers
                )
                if full and len(workers) == live_workers and fair:
                    return time.monotonic() - started
            await asyncio.sleep(0.1)
        raise TimeoutError(f"shards not all owned by {live_workers} workers: {last}")

    def client(self, timeout_s: float = 30.0, address: str | None = None) -> ClockworkClient:
        """A client of the api (`address`: of another one, from `add_api`)."""
        return ClockworkClient(
            ClientSettings(address or self.api_address, tenant=self.tenant, timeout_s=timeout_s)
        )

    def pids(self) -> dict[str, int]:
        """Running processes by name (`api`, `worker0`, ...), for resource monitors."""
        found = {f"worker{i}": w.proc.pid for i, w in enumerate(self.workers) if w.proc}
        if self.api is not None and self.api.proc is not None:
            found["api"] = self.api.proc.pid
        return found

    # --- nemeses on Clockwork's processes ---------------------------------------------------

    async def kill_worker(self, index: int, respawn: bool = False) -> Window:
        """kill -9 a worker; the window lasts until the survivors own every shard (and,
        with `respawn`, until a replacement has joined)."""
        start = now_ms()
        victim = self.workers[index]
        await victim.kill(signal.SIGKILL)
        live = len(self.live_workers())
        await self.wait_all_owned(live, self.lease_ttl + 20)
        if respawn:
            await self.add_worker()
            await self.wait_all_owned(live + 1, 60)
        return Window(f"kill -9 worker{index}", start, now_ms())

    async def pause_worker(self, index: int, seconds: float) -> Window:
        """SIGSTOP a worker for `seconds` (past its lease when longer than the TTL), then
        SIGCONT it; the window ends once it has rejoined."""
        start = now_ms()
        victim = self.workers[index]
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        await self.wait_all_owned(len(self.live_workers()), 60)
        return Window(f"SIGSTOP worker{index} {seconds:.0f}s", start, now_ms())

    async def kill_api(self) -> None:
        if self.api is not None:
            await self.api.kill(signal.SIGKILL)

    # --- teardown -----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop every process, then drop the cluster's keyspace. Every run makes a new
        one; kept, they would pile up over many benchmark and test runs until the
        harness's Cassandra (1 GiB heap) runs out of heap.

        Then raise `UnexpectedFaults` if a process of the cluster
        logged a fault Clockwork did not expect (`unexpected_faults`): such a fault
        can leave a run's outcome intact (a scan retried after it) and still be a bug."""
        await self._stop()
        faults = self.unexpected_faults()
        if faults:
            raise UnexpectedFaults(
                f"{len(faults)} unexpected fault(s) in the cluster's logs:\n"
                + "\n".join(faults[:20])
            )

    async def _stop(self) -> None:
        await _terminate(self._processes())
        if len(self.cassandra.contact_points) > 1:
            await _settle_replicas(self.cassandra, SETTLE_TIMEOUT_S)
        try:
            await drop_keyspace_for_tests(
                self.cassandra.contact_points, self.keyspace, **self.cassandra.connect_kwargs()
            )
        except Exception as exc:  # noqa: BLE001 - best effort: the run's result stands
            print(f"keyspace {self.keyspace} not dropped: {exc}")

    def unexpected_faults(self) -> list[str]:
        """Every line that one of Clockwork's own loggers wrote at ERROR or above, in
        the logs of every process this cluster started (restarted ones included): the
        file, the message and the exception's last line."""
        found: list[str] = []
        for path in sorted(self._log_paths):
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                fault = _unexpected_fault(line)
                if fault is not None:
                    found.append(f"{path.name}: {fault}")
        return found

    def logs(self, tail_chars: int = 3000) -> str:
        return "\n".join(
            f"--- {p.log_path.name}\n{p.log()[-tail_chars:]}" for p in self._processes()
        )

    def _processes(self) -> list[ClockworkProcess]:
        """Every process started: workers and apis."""
        return [*self.workers, *self.other_apis, *([self.api] if self.api else [])]


def _unexpected_fault(line: str) -> str | None:
    """The line's message (and its exception's last line) if it is a JSON log record of
    Clockwork's own code at a level in FAULT_LEVELS."""
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("level") not in FAULT_LEVELS:
        return None
    if not str(record.get("logger", "")).startswith("clockwork_svc"):
        return None
    exception = str(record.get("exception", "")).strip().splitlines()
    return f"{record.get('event')}" + (f" ({exception[-1]})" if exception else "")


async def _terminate(procs: Sequence[ClockworkProcess]) -> None:
    """SIGTERM each running process (after a SIGCONT, in case a nemesis stopped it);
    SIGKILL if it does not exit in time."""
    for proc in procs:
        if proc.proc is not None and proc.proc.returncode is None:
            try:
                proc.proc.send_signal(signal.SIGCONT)
                await proc.kill(signal.SIGTERM)
            except (ProcessLookupError, TimeoutError):
                await proc.kill(signal.SIGKILL)


async def _settle_replicas(cassandra: CassandraAccess, timeout_s: float) -> None:
    """Wait until the replicas hold no hints and agree on the schema (see
    cassandra_cluster.unsettled): a keyspace dropped before that can leave a node on
    an old schema."""
    points = [parse_contact_point(p) for p in cassandra.contact_points]
    # Reading system_views takes more than Clockwork's role may: on a secured harness
    # cluster, the check logs in as the harness's own superuser.
    tls, login = cassandra.ssl_context(), SUPERUSER if cassandra.username else None
    deadline = time.monotonic() + timeout_s
    while found := await asyncio.to_thread(unsettled, points, tls=tls, login=login):
        if time.monotonic() > deadline:
            print(f"replicas not settled after {timeout_s:.0f}s: {'; '.join(found)}")
            return
        await asyncio.sleep(1.0)


class ApiAccess(Protocol):
    """What ``settle`` needs of a deployment: a client of its api."""

    def client(self, timeout_s: float = 30.0) -> ClockworkClient: ...


async def settle(
    cluster: ApiAccess,
    workload: Workload,
    sink: RecordingSink,
    end_ms: int,
    windows: Sequence[Window] = (),
    timeout_s: float = 60.0,
    *,
    until_ms: int | None = None,
) -> Report:
    """Wait past `end_ms` until every required firing is accounted for (or the timeout),
    give stragglers (duplicates) a moment, then judge with the API's outcomes.

    `until_ms` (before `end_ms`): judge only the firings due before it, and wait only
    for those; the workload's later ones may arrive meanwhile, and are not unexpected."""
    expectations = workload.expectations(end_ms)
    if until_ms is not None:
        expectations.required_before(until_ms)
        end_ms = min(end_ms, until_ms)
    await asyncio.sleep(max(0, end_ms - now_ms()) / 1000)
    deadline = time.monotonic() + timeout_s
    async with cluster.client() as client:
        outcomes = None
        while True:
            report = judge(expectations, sink.received, outcomes, windows)
            if not report.lost or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
            if len(report.lost) <= 200:
                outcomes = await collect_outcomes(client, expectations, sink.received)
        await asyncio.sleep(1.5)
        outcomes = await collect_outcomes(client, expectations, sink.received)
    return judge(expectations, sink.received, outcomes, windows)
