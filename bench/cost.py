"""Cost benchmark: what a pending schedule costs in Cassandra, what an owned shard costs
a worker at rest, and a worker's memory with many pending schedules in its shards.

Usage: python -m bench.cost [--schedules 20000] [--pending 1000000] [--idle-s 30]

- bytes per pending schedule: `--schedules` one-shots (due in a day) created through
  the API; the keyspace's memtables are flushed (the tables' flush period set to 1 s:
  the harness runs Cassandra without JMX, so there is no nodetool), then the on-disk
  size of every table of the keyspace divided by the count;
- idle worker: CPU seconds per shard per second and RSS of one worker owning every
  shard with nothing due;
- `--pending` firings (default 1M) written straight into the store (the firing rows a
  create writes, due 1 to 3 hours ahead, spread over all shards), then the same worker
  measured again: its RSS must not grow with the backlog (prefetch is windowed).
Worker and api CPU per 100k firings come from bench/fire.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop

from bench import fire, raw_cassandra
from bench.cluster import TENANT, BenchCluster
from bench.common import machine, now_ms, print_table, write_json
from bench.resources import ResourceMonitor
from clockwork_svc.domain import planning, triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.storage.cassandra import CassandraStore
from e2e.infra.cassandra import Cassandra

_TABLES = ("schedules", "schedule_index", "firings")


def _table_bytes(keyspace: str) -> dict[str, int] | None:
    """On-disk bytes per table of `keyspace` (the harness's node, on this machine)."""
    state = os.environ.get("CLOCKWORK_INFRA_STATE")
    root = Cassandra(Path(state) if state else None).data_dir / "data" / keyspace
    if not root.is_dir():
        return None
    sizes: dict[str, int] = {}
    for table_dir in root.iterdir():
        table = table_dir.name.rsplit("-", 1)[0]
        sizes[table] = sum(f.stat().st_size for f in table_dir.rglob("*") if f.is_file())
    return sizes


async def _flush(cluster: BenchCluster, wait_s: float = 75.0) -> None:
    """Make Cassandra flush the keyspace's memtables (a flush period on each table)."""
    c, session, _ = await raw_cassandra.connect(
        cluster.env["CLOCKWORK_CASSANDRA"], cluster.keyspace
    )
    try:
        for table in _TABLES:
            await asyncio.to_thread(
                session.execute,
                f"ALTER TABLE {cluster.keyspace}.{table} WITH memtable_flush_period_in_ms = 1000",
            )
    finally:
        await raw_cassandra.shutdown(c)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        sizes = _table_bytes(cluster.keyspace) or {}
        if all(sizes.get(t, 0) > 0 for t in _TABLES):
            await asyncio.sleep(3.0)  # let the last flushes finish
            return
        await asyncio.sleep(1.0)


async def bytes_per_schedule(cluster: BenchCluster, n: int) -> dict[str, Any]:
    async with cluster.client() as client:
        far = [now_ms() + 86_400_000] * n
        await fire._create(client, "size", far, HttpTarget("http://127.0.0.1:9/x"), {})
    await _flush(cluster)
    sizes = _table_bytes(cluster.keyspace)
    if sizes is None:
        return {"bytes_per_schedule": None, "note": "Cassandra data dir not on this machine"}
    per = {t: round(sizes.get(t, 0) / n, 1) for t in _TABLES}
    return {
        "schedules": n,
        "bytes_per_schedule": round(sum(per.values()), 1),
        **{f"{t}_bytes": v for t, v in per.items()},
    }


async def write_pending(cluster: BenchCluster, n: int) -> float:
    """n firing rows due 1-3 h ahead, written with the store's batched put; rows/s."""
    store = await CassandraStore.open([cluster.env["CLOCKWORK_CASSANDRA"]], cluster.keyspace)
    layout = await store.layout()
    start = now_ms() + 3_600_000
    url = HttpTarget("http://127.0.0.1:9/pending")
    started = time.perf_counter()
    try:
        chunk = 20_000
        for base in range(0, n, chunk):
            firings = []
            for i in range(base, min(n, base + chunk)):
                due = start + (i * 7_200_000) // n
                spec = ScheduleSpec(triggers.OnceTrigger(due), url)
                _, firing = planning.new_schedule(
                    TENANT, f"p-{i}", spec, uuid.uuid4().hex, now_ms(), layout
                )
                assert firing is not None
                firings.append(firing)
            await store.put_firings(firings)
    finally:
        await store.close()
    return n / (time.perf_counter() - started)


async def idle_worker(cluster: BenchCluster, seconds: float) -> dict[str, Any]:
    pid = cluster.pids()["worker0"]
    monitor = ResourceMonitor({"worker": pid}).start()
    await asyncio.sleep(seconds)
    usage = (await monitor.stop())["worker"]
    per_shard = usage.cpu_s / seconds / cluster.shards
    return {
        "seconds": seconds,
        "cpu_s": usage.cpu_s,
        "cpu_s_per_shard_s": round(per_shard, 5),
        "peak_rss_mb": usage.peak_rss_mb,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="bench-cost-"))
    report: dict[str, Any] = {
        "benchmark": "cost",
        "machine": machine(),
        "shards": args.shards,
        "logs": str(run_dir),
    }

    async def body(cluster: BenchCluster, _: Path) -> None:
        report["storage"] = await bytes_per_schedule(cluster, args.schedules)
        await cluster.start_workers(1)
        await asyncio.sleep(3)
        report["idle_worker"] = await idle_worker(cluster, args.idle_s)
        await cluster.stop_workers()
        report["pending_written_per_s"] = round(await write_pending(cluster, args.pending), 1)
        await cluster.start_workers(1)
        await asyncio.sleep(3)
        loaded = await idle_worker(cluster, args.idle_s)
        report["worker_with_pending"] = {"pending": args.pending, **loaded}

    await fire.with_cluster(args.shards, 512, body)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--idle-s", type=float, default=30)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    rows = [
        {"measure": k, **v} if isinstance(v, dict) else {"measure": k, "value": v}
        for k, v in report.items()
        if k in ("storage", "idle_worker", "worker_with_pending", "pending_written_per_s")
    ]
    for row in rows:
        print_table(row.pop("measure"), [row])
    print(f"json: {write_json('cost', report, args.out)}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
