"""A Clockwork deployment for one benchmark run: a fresh keyspace on the harness's
Cassandra, one `clockwork api` and N `clockwork worker` processes (shards shared
through etcd), each a real child process logging to the run's directory."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.coordination.etcd import cluster_status
from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving

TENANT = "bench"


def servers() -> tuple[str, str]:
    """Cassandra and etcd addresses from the harness's env lines."""
    cassandra = os.environ.get("CLOCKWORK_CASSANDRA", "")
    etcd = os.environ.get("CLOCKWORK_ETCD", "")
    if not cassandra or not etcd:
        sys.exit(
            "CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD must be set: "
            'eval "$(python -m e2e.infra up cassandra etcd)" (or run scripts/bench.sh)'
        )
    return cassandra, etcd


class BenchCluster:
    def __init__(self, run_dir: Path, shards: int, max_concurrent_deliveries: int = 512) -> None:
        cassandra, etcd = servers()
        self.run_dir = run_dir
        self.shards = shards
        self.max_concurrent = max_concurrent_deliveries
        self.keyspace = "bench_" + uuid.uuid4().hex[:10]
        self.name = "b" + uuid.uuid4().hex[:8]
        self.etcd = etcd
        self.env = {
            "CLOCKWORK_CASSANDRA": cassandra,
            "CLOCKWORK_KEYSPACE": self.keyspace,
            "CLOCKWORK_ETCD": etcd,
            "CLOCKWORK_CLUSTER": self.name,
            # BENCH_LOG_LEVEL=INFO (or DEBUG) to see the processes' own logs in run_dir.
            "CLOCKWORK_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT": "60",
        }
        self.api: ClockworkProcess | None = None
        self.api_address = ""
        self.workers: list[ClockworkProcess] = []

    async def migrate(self) -> None:
        code, _, err = await run_cli(
            "schema",
            "migrate",
            "--replication-factor",
            "1",
            "--shards",
            str(self.shards),
            env=self.env,
        )
        if code != 0:
            raise RuntimeError(f"schema migrate failed: {err}")

    async def start_api(self) -> None:
        self.api_address = f"127.0.0.1:{free_port()}"
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
            self.run_dir / "api.log",
            self.env,
        ).start()
        await wait_serving(self.api_address)

    async def start_workers(self, count: int, timeout_s: float = 90.0) -> None:
        for _ in range(count):
            n = len(self.workers)
            self.workers.append(
                await ClockworkProcess(
                    [
                        "worker",
                        "--allow-private-targets",
                        "127.0.0.0/8",
                        "--ops-listen",
                        "127.0.0.1:0",
                        "--max-concurrent-deliveries",
                        str(self.max_concurrent),
                    ],
                    self.run_dir / f"worker{n}.log",
                    self.env,
                ).start()
            )
        await self.wait_owned(len(self.workers), timeout_s)

    async def wait_owned(self, live_workers: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                view = await cluster_status(self.etcd, self.name)
            except Exception as exc:  # noqa: BLE001 - etcd slow to answer on a busy machine
                print(f"etcd status not read yet: {exc}")
                await asyncio.sleep(1.0)
                continue
            if len(view.workers) == live_workers and len(view.owners) == self.shards:
                return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.shards} shards not owned by {live_workers} workers in time")

    def pids(self) -> dict[str, int]:
        found = {f"worker{i}": w.proc.pid for i, w in enumerate(self.workers) if w.proc}
        if self.api is not None and self.api.proc is not None:
            found["api"] = self.api.proc.pid
        return found

    def client(self) -> ClockworkClient:
        return ClockworkClient(ClientSettings(self.api_address, tenant=TENANT, timeout_s=120))

    async def stop_workers(self) -> None:
        await _terminate(self.workers)
        self.workers = []

    async def stop(self) -> None:
        await _terminate([*self.workers, *([self.api] if self.api else [])])
        self.workers, self.api = [], None


async def _terminate(procs: list[ClockworkProcess]) -> None:
    for proc in procs:
        if proc.proc is not None and proc.proc.returncode is None:
            try:
                await proc.kill(signal.SIGTERM)
            except TimeoutError:
                await proc.kill(signal.SIGKILL)
