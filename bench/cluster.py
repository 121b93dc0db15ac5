"""A Clockwork deployment for one benchmark run: e2e's `Cluster` (a fresh keyspace on
the harness's Cassandra, one `clockwork api` and N `clockwork worker` processes
sharing shards through etcd, each a real child process logging to the run's
directory) with the benchmarks' settings."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from clockwork_svc.client import ClockworkClient
from clockwork_svc.gc_policy import YOUNG_THRESHOLD
from clockwork_svc.settings import EtcdSettings
from e2e.cluster import Cluster
from e2e.stores import CassandraAccess, EtcdAccess

TENANT = "bench"


def servers() -> tuple[CassandraAccess, EtcdAccess]:
    """Cassandra and etcd from the harness's env lines: CLOCKWORK_CASSANDRA and
    CLOCKWORK_ETCD, with the TLS and login of their companion variables (e2e/stores.py;
    for the secured three-node clusters, `scripts/on-clusters.sh python -m bench.fire`)."""
    cassandra = CassandraAccess.from_env("CLOCKWORK_CASSANDRA")
    etcd = EtcdAccess.from_env("CLOCKWORK_ETCD")
    if not cassandra.contact_points or not etcd.endpoints:
        sys.exit(
            "CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD must be set: "
            'eval "$(python -m e2e.infra up cassandra etcd)" (or run scripts/bench.sh)'
        )
    return cassandra, etcd


class BenchCluster(Cluster):
    def __init__(
        self,
        run_dir: Path,
        shards: int,
        max_concurrent_deliveries: int = 512,
        gc_young_threshold: int = YOUNG_THRESHOLD,
    ) -> None:
        cassandra, etcd = servers()
        super().__init__(
            run_dir,
            cassandra,
            etcd,
            shards=shards,
            lease_ttl=EtcdSettings().lease_ttl_s,  # the worker's default, as deployed
            # BENCH_LOG_LEVEL=INFO (or DEBUG) to see the processes' own logs in run_dir.
            log_level=os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            keyspace_prefix="bench_",
            worker_flags=("--max-concurrent-deliveries", str(max_concurrent_deliveries)),
            tenant=TENANT,
        )
        # Every process of the cluster (api and workers) collects with this threshold.
        self.env["CLOCKWORK_GC_YOUNG_THRESHOLD"] = str(gc_young_threshold)

    def client(self, timeout_s: float = 120.0, address: str | None = None) -> ClockworkClient:
        return super().client(timeout_s, address)


@contextlib.asynccontextmanager
async def api_cluster(
    name: str, shards: int, env: Mapping[str, str] | None = None
) -> AsyncIterator[BenchCluster]:
    """A fresh keyspace and one running api (no workers), logging to a new
    `bench-<name>-` directory; `env` adds settings. Stopped (keyspace dropped) on exit."""
    cluster = BenchCluster(Path(tempfile.mkdtemp(prefix=f"bench-{name}-")), shards=shards)
    cluster.env.update(env or {})
    await cluster.migrate()
    await cluster.start_api()
    try:
        yield cluster
    finally:
        await cluster.stop()
