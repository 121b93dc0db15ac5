"""Cost benchmark: what pending schedules cost, created in bulk through the batch API:
the creation rate as the store fills, a worker's memory and idle cost with every one
of them pending, and the bytes each takes in Cassandra.

Usage: python -m bench.cost [--pending 10000000] [--lead-h H] [--idle-s 30] [--shards 64]

1. idle: one worker owning every shard, nothing pending: its CPU per shard-second and
   Cassandra's, over `--idle-s`;
2. bulk: `--pending` one-shots due evenly over the 24 hours from `--lead-h` ahead (a
   day's buckets; by default far enough ahead that none falls due during the run),
   created through BatchCreateSchedules (500 per call, 4 calls in flight) while the
   worker runs: the rate over each tenth of the creates (does it hold as the store
   fills?), the api's CPU per create, and the RSS of worker, api and Cassandra sampled
   every 5 s (warm, peak, last);
3. idle again, every schedule pending: a worker scans only the due window of its
   shards' current bucket, so its cost and memory must not grow with the backlog;
4. bytes per pending schedule: the keyspace's memtables flushed (the tables' flush
   period set to 1 s: the harness runs Cassandra without JMX, so there is no
   nodetool), then the on-disk size of each table divided by `--pending`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvloop

from bench import fire, raw_cassandra
from bench.cluster import BenchCluster
from bench.common import machine, now_ms, print_table, write_json
from bench.resources import ResourceMonitor, RssTimeline, listening
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from e2e.infra.cassandra import Cassandra
from e2e.workload import BatchCreate

_TABLES = ("schedules_by_part", "firings")
BATCH = 500
IN_FLIGHT = 4
DAY_MS = 86_400_000


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


async def _flush(cluster: BenchCluster, wait_s: float = 300.0) -> bool:
    """Make Cassandra flush the keyspace's memtables (a flush period on each table),
    then wait until the on-disk sizes hold still for 10 s (flushes and the compactions
    they start have finished); False if they did not within `wait_s`, or the data dir
    is not on this machine."""
    c, session, _ = await raw_cassandra.connect(cluster.cassandra, cluster.keyspace)
    try:
        for table in _TABLES:
            await asyncio.to_thread(
                session.execute,
                f"ALTER TABLE {cluster.keyspace}.{table} WITH memtable_flush_period_in_ms = 1000",
            )
    finally:
        await raw_cassandra.shutdown(c)
    if _table_bytes(cluster.keyspace) is None:
        return False
    deadline = time.monotonic() + wait_s
    last: dict[str, int] | None = None
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        sizes = _table_bytes(cluster.keyspace) or {}
        if sizes != last or not all(sizes.get(t, 0) > 0 for t in _TABLES):
            last, still_since = sizes, time.monotonic()
        elif time.monotonic() - still_since >= 10.0:
            return True
    return False


def storage(cluster: BenchCluster, n: int) -> dict[str, Any]:
    sizes = _table_bytes(cluster.keyspace)
    if sizes is None:
        return {"bytes_per_schedule": None, "note": "Cassandra data dir not on this machine"}
    per = {t: round(sizes.get(t, 0) / n, 1) for t in _TABLES}
    return {
        "schedules": n,
        "bytes_per_schedule": round(sum(per.values()), 1),
        **{f"{t}_bytes": v for t, v in per.items()},
        "keyspace_mb": round(sum(sizes.values()) / 2**20, 1),
    }


async def idle(cluster: BenchCluster, seconds: float) -> dict[str, Any]:
    """CPU per shard-second of the worker (and Cassandra's) and the worker's RSS."""
    pids = {"worker": cluster.pids()["worker0"]} | _cassandra(cluster)
    monitor = ResourceMonitor(pids).start()
    await asyncio.sleep(seconds)
    usage = await monitor.stop()
    shard_s = seconds * cluster.shards
    out: dict[str, Any] = {
        "seconds": seconds,
        "worker_cpu_s_per_shard_s": round(usage["worker"].cpu_s / shard_s, 5),
        "worker_peak_rss_mb": usage["worker"].peak_rss_mb,
    }
    if "cassandra" in usage:
        out["cassandra_cpu_s_per_shard_s"] = round(usage["cassandra"].cpu_s / shard_s, 5)
    return out


def _cassandra(cluster: BenchCluster) -> dict[str, int]:
    return listening({"cassandra": cluster.env["CLOCKWORK_CASSANDRA"]})


def _entries(n: int, first_due_ms: int) -> Iterator[list[tuple[str, ScheduleSpec]]]:
    target = HttpTarget("http://127.0.0.1:9/pending")
    for base in range(0, n, BATCH):
        yield [
            (f"p-{i}", ScheduleSpec(triggers.OnceTrigger(first_due_ms + i * DAY_MS // n), target))
            for i in range(base, min(n, base + BATCH))
        ]


async def bulk(cluster: BenchCluster, n: int, lead_ms: int) -> dict[str, Any]:
    """Create n one-shots through the batch API; the rate per tenth, CPU and RSS."""
    first_due = now_ms() + lead_ms
    batches = _entries(n, first_due)
    done: list[tuple[float, int]] = []  # (seconds since start, creates acknowledged)
    count = retried = 0
    pids = cluster.pids() | _cassandra(cluster)
    timeline = RssTimeline(lambda: pids, 5.0).start()
    monitor = ResourceMonitor({"api": pids["api"]}).start()
    started = time.perf_counter()
    next_report = max(1, n // 10)
    async with cluster.client(timeout_s=120) as client:

        async def caller() -> None:
            nonlocal count, retried, next_report
            for entries in batches:
                creating = BatchCreate(client, entries, timeout_s=300)
                async for _ in creating.acknowledgements():
                    pass
                count += len(entries)
                retried += creating.retried
                done.append((time.perf_counter() - started, count))
                if count >= next_report:
                    next_report += max(1, n // 10)
                    rate = count / (time.perf_counter() - started)
                    print(f"cost: {count:,} created, {rate:,.0f}/s", file=sys.stderr, flush=True)

        async with asyncio.TaskGroup() as callers:
            for _ in range(IN_FLIGHT):
                callers.create_task(caller())
    elapsed = time.perf_counter() - started
    api = (await monitor.stop())["api"]
    await timeline.stop()
    rates = tenths(done, n)
    return {
        "created": count,
        "seconds": round(elapsed, 1),
        "per_s": round(count / elapsed),
        "per_s_by_tenth": rates,
        "slowest_tenth_vs_first": slowest_vs_first(rates),
        "ended_before_first_due": now_ms() < first_due,
        "calls_retried": retried,
        "api_ms_per_create": round(api.cpu_s * 1000 / max(1, count), 3),
        "rss_mb": timeline.summary(),
    }


def tenths(done: list[tuple[float, int]], n: int) -> list[int | None]:
    """Creates per second over each tenth of the creates (None for a tenth that ended
    within the same batch as the one before it)."""
    if not done:
        return []
    rates: list[int | None] = []
    t_prev, c_prev = 0.0, 0
    for k in range(1, 11):
        mark = n * k // 10
        t, c = next(((t, c) for t, c in done if c >= mark), done[-1])
        if c > c_prev and t > t_prev:
            rates.append(round((c - c_prev) / (t - t_prev)))
            t_prev, c_prev = t, c
        else:
            rates.append(None)
    return rates


def slowest_vs_first(rates: list[int | None]) -> float | None:
    """The slowest tenth's rate over the first's (the tenths measured)."""
    known = [r for r in rates if r]
    return round(min(known) / known[0], 2) if known else None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    lead_ms = int(
        (args.lead_h if args.lead_h is not None else 1 + args.pending / 500 / 3600) * 3_600_000
    )
    report: dict[str, Any] = {
        "benchmark": "cost",
        "machine": machine(),
        "shards": args.shards,
        "pending": args.pending,
        "first_due_h": round(lead_ms / 3_600_000, 2),
    }

    async def body(cluster: BenchCluster, run_dir: Path) -> None:
        report["logs"] = str(run_dir)
        await cluster.start_workers(1)
        await asyncio.sleep(3)
        report["idle_empty"] = await idle(cluster, args.idle_s)
        report["bulk"] = await bulk(cluster, args.pending, lead_ms)
        await asyncio.sleep(3)
        report["idle_full"] = await idle(cluster, args.idle_s)
        await cluster.stop_workers()
        settled = await _flush(cluster)
        report["storage"] = storage(cluster, args.pending) | {"flush_settled": settled}

    await fire.with_cluster(args.shards, 512, body)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000_000)
    parser.add_argument(
        "--lead-h",
        type=float,
        default=None,
        help="hours until the first due time (default: 1 + pending / 500 per s)",
    )
    parser.add_argument("--idle-s", type=float, default=30)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    bulk_row = {k: v for k, v in report["bulk"].items() if k != "rss_mb"}
    print_table("bulk creation", [bulk_row])
    print_table(
        "RSS during bulk creation (MiB)",
        [{"process": name, **m} for name, m in report["bulk"]["rss_mb"].items()],
    )
    print_table(
        "idle worker",
        [
            {"pending": 0, **report["idle_empty"]},
            {"pending": args.pending, **report["idle_full"]},
        ],
    )
    print_table("storage", [report["storage"]])
    print(f"json: {write_json('cost', report, args.out)}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
