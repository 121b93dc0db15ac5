"""Accept benchmark: creating schedules through the gRPC API into real Cassandra,
against the raw limit of the same writes made straight with the driver.

Usage: python -m bench.accept [--n 200000] [--concurrency 16,64,256] [--batch 500]
                            [--warm-up 0.25]

Needs CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD (scripts/bench.sh starts them). Starts
one `clockwork api` on a fresh keyspace and creates N one-shot schedules (due in a
day, so nothing fires) per mode: unary calls at each concurrency, and batches
(BatchCreateSchedules, 4 in flight). First a warm-up: a quarter of N (--warm-up) as
unary calls at the highest concurrency, reported as "warm-up" and left out of the best
rate: a just-started Cassandra compiles its hot paths over its first thousands of
requests, and the raw limits, measured last, find it warm. Then two raw limits: the
same rows (schedule, first firing) written with the driver's execute_async at several
concurrencies, no API in between, once with the schedule as a plain INSERT and once
as the store's conditional insert, one Paxos round per schedule (the API groups a
batch's creates per partition, so it can pass this limit). Reports schedules/s, latency
p50/p99/p99.9 and the ratio API / raw against each limit (best of each). A table on
stdout, JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import uvloop

from bench import raw_cassandra
from bench.cluster import TENANT, BenchCluster, api_cluster
from bench.common import (
    add_warm_up,
    latency_summary,
    machine,
    now_ms,
    print_table,
    ratio,
    warm_up_count,
    write_json,
)
from bench.resources import ResourceMonitor, Usage, listening
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.errors import ClockworkError

PAYLOAD = b'{"bench":"accept","note":"a small json payload like a webhook event"}'
BATCH_IN_FLIGHT = 4


def far_spec() -> ScheduleSpec:
    return ScheduleSpec(
        triggers.OnceTrigger(now_ms() + 86_400_000),
        HttpTarget("http://127.0.0.1:9/never"),
        payload=PAYLOAD,
    )


async def unary(
    client: ClockworkClient, spec: pb.ScheduleSpec, prefix: str, n: int, concurrency: int
) -> dict[str, Any]:
    keys = iter(range(n))
    latencies: list[float] = []

    async def one_caller() -> None:
        for i in keys:
            started = time.perf_counter()
            await client.create(f"{prefix}-{i}", spec)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(one_caller() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "mode": f"unary c={concurrency}",
        "n": n,
        "per_s": n / elapsed,
        **latency_summary(latencies),
    }


def labels_of(i: int, count: int) -> dict[str, str]:
    """`count` labels for schedule i, from a few values each (as teams and envs are)."""
    return {f"label-{j}": f"value-{(i + j) % 7}" for j in range(count)}


async def batched(
    client: ClockworkClient,
    spec: pb.ScheduleSpec,
    prefix: str,
    n: int,
    size: int,
    labels: int = 0,
) -> dict[str, Any]:
    starts = iter(range(0, n, size))
    latencies: list[float] = []

    async def one_caller() -> None:
        for b in starts:
            entries = [
                (f"{prefix}-{i}", spec, labels_of(i, labels)) for i in range(b, min(n, b + size))
            ]
            started = time.perf_counter()
            results = await client.create_many(entries)
            latencies.append((time.perf_counter() - started) * 1000)
            failed = [str(r) for r in results if isinstance(r, ClockworkError)]
            if failed:
                raise RuntimeError(f"batch create failed: {failed[:3]}")

    started = time.perf_counter()
    await asyncio.gather(*(one_caller() for _ in range(BATCH_IN_FLIGHT)))
    elapsed = time.perf_counter() - started
    return {
        "mode": f"batch {size} x{BATCH_IN_FLIGHT}" + (f" {labels} labels" if labels else ""),
        "n": n,
        "per_s": n / elapsed,
        "labels": labels,
        **latency_summary(latencies),
    }


async def raw_limit(
    cluster: BenchCluster, n: int, concurrencies: list[int]
) -> list[dict[str, Any]]:
    c, session, layout = await raw_cassandra.connect(cluster.cassandra, cluster.keyspace)
    try:
        out = []
        for kind in ("plain", "conditional"):
            conditional = kind == "conditional"
            inserter = await asyncio.to_thread(
                raw_cassandra.RawInserter, session, cluster.keyspace, conditional
            )
            for k in concurrencies:
                keys = [f"raw-{kind}{k}-{i}" for i in range(n)]
                params = raw_cassandra.create_params(TENANT, keys, far_spec(), layout, conditional)
                result = await asyncio.to_thread(inserter.run, params, k)
                out.append(
                    {
                        "mode": f"raw {kind} c={k}",
                        "kind": kind,
                        "n": n,
                        "per_s": result.per_s,
                        "errors": result.errors,
                    }
                )
        return out
    finally:
        await raw_cassandra.shutdown(c)


def cpu_columns(usage: dict[str, Usage]) -> dict[str, float]:
    """`api_cpu_s` and `cassandra_cpu_s` (when measured) over one mode."""
    return {f"{name}_cpu_s": round(u.cpu_s, 2) for name, u in usage.items()}


async def measured(
    pids: dict[str, int], mode: Coroutine[Any, Any, dict[str, Any]]
) -> dict[str, Any]:
    """Run one mode (a coroutine not yet started) and add the CPU its processes spent."""
    monitor = ResourceMonitor(pids).start()
    row = await mode
    return row | cpu_columns(await monitor.stop())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "accept",
        "machine": machine(),
        "n": args.n,
        "shards": args.shards,
    }
    async with api_cluster("accept", args.shards) as cluster:
        report["logs"] = str(cluster.run_dir)
        spec = far_spec()
        pb_spec = convert.spec_to_pb(spec)
        modes: list[dict[str, Any]] = []
        async with cluster.client() as client:
            pids = cluster.pids() | listening({"cassandra": cluster.env["CLOCKWORK_CASSANDRA"]})
            if args.warm_up > 0:
                warm_n = warm_up_count(args.n, args.warm_up)
                row = await measured(
                    pids, unary(client, pb_spec, "warm", warm_n, max(args.concurrency))
                )
                row["mode"] = f"warm-up: {row['mode']}"
                report["warm_up"] = row
                print_table("accept", [row])
            for k in args.concurrency:
                row = await measured(pids, unary(client, pb_spec, f"u{k}", args.n, k))
                modes.append(row)
                print_table("accept", [row])
            modes.append(await measured(pids, batched(client, pb_spec, "b", args.n, args.batch)))
            if args.labels:
                # The same creates, each with labels: the cost of the labels index.
                with_labels = batched(client, pb_spec, "l", args.n, args.batch, args.labels)
                modes.append(await measured(pids, with_labels))
        raw = await raw_limit(cluster, args.n, args.raw_concurrency)
    report["modes"] = modes
    report["raw"] = raw
    report["best_api_per_s"] = best_api = max(m["per_s"] for m in modes if not m.get("labels"))
    labelled = [m["per_s"] for m in modes if m.get("labels")]
    if labelled:
        plain = next(m["per_s"] for m in modes if m["mode"].startswith("batch") and not m["labels"])
        report["ratio_labelled_to_plain_batch"] = ratio(labelled[0], plain)
    for kind in ("plain", "conditional"):
        best = max(r["per_s"] for r in raw if r["kind"] == kind)
        report[f"best_raw_{kind}_per_s"] = best
        report[f"ratio_api_to_raw_{kind}"] = ratio(best_api, best)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="schedules per mode")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256]
    )
    parser.add_argument(
        "--raw-concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[64, 256, 1024]
    )
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument(
        "--labels",
        type=int,
        default=0,
        help="also create N more schedules in batches with this many labels each",
    )
    parser.add_argument("--shards", type=int, default=64)
    add_warm_up(parser, of="--n")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    warm = [report["warm_up"]] if "warm_up" in report else []
    print_table("accept: API vs raw driver", [*warm, *report["modes"], *report["raw"]])
    for kind in ("plain", "conditional"):
        print(f"ratio best API / best raw {kind} = {report[f'ratio_api_to_raw_{kind}']}")
    print(f"json: {write_json('accept', report, args.out)}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
