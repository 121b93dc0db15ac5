"""Overload benchmark: bursts of CreateSchedule calls far beyond what one `clockwork
api` (on real Cassandra) serves, and how it answers them.

Usage: python -m bench.overload [--max-in-flight 512] [--factors 10,100]
                                [--connections 8] [--capacity-n 5000]

Needs CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD (scripts/bench.sh starts them). Starts
one api with `--max-in-flight` on a fresh keyspace, then:

1. capacity: creates through the typed client with half the limit in flight: the
   rate the api serves, and its CPU per create;
2. bursts: for each factor, factor x max-in-flight calls sent at once on
   `--connections` connections with gRPC's retries off (a tenth of them invalid), with
   a health check every 50 ms beside them on a connection of its own. Every call must
   end OK, INVALID_ARGUMENT or UNAVAILABLE with a retry hint (`unclean` counts any
   other answer, and refusals without a hint); reported: the counts, p50/p99 latency
   of admitted and of refused calls (the client's view, which includes the wait in
   the client for a free stream), the hints, the slowest health check, and the api's
   peak RSS and CPU;
3. a retried burst: 10 x max-in-flight creates at once through the typed client (one
   connection, gRPC's retry policy and the client's hinted retries): every create
   must land exactly once (`created` true for each, then each key found).

A table on stdout, JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import time
from pathlib import Path
from typing import Any

import grpc
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.accept import far_spec
from bench.cluster import TENANT, BenchCluster, api_cluster
from bench.common import latency_summary, machine, pct, print_table, write_json
from bench.resources import ResourceMonitor
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.client import refusal_hint_ms
from clockwork_svc.server.auth import TENANT_METADATA

CLEAN = {"OK", "INVALID_ARGUMENT", "UNAVAILABLE"}


async def capacity(cluster: BenchCluster, spec: pb.ScheduleSpec, n: int, k: int) -> dict[str, Any]:
    keys = iter(range(n))
    latencies: list[float] = []
    async with cluster.client() as client:

        async def caller() -> None:
            for i in keys:
                started = time.perf_counter()
                await client.create(f"cap-{i}", spec)
                latencies.append((time.perf_counter() - started) * 1000)

        monitor = ResourceMonitor(cluster.pids()).start()
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(k)))
        elapsed = time.perf_counter() - started
        usage = await monitor.stop()
    return {
        "phase": f"capacity c={k}",
        "calls": n,
        "ok_per_s": round(n / elapsed),
        "api_ms_per_create": round(usage["api"].cpu_s * 1000 / n, 3),
        "api_peak_rss_mb": usage["api"].peak_rss_mb,
        **latency_summary(latencies),
    }


async def burst(
    cluster: BenchCluster, spec: pb.ScheduleSpec, factor: int, limit: int, connections: int
) -> dict[str, Any]:
    n = factor * limit
    # Retries off, and each channel with a connection of its own (not one shared).
    options = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(cluster.api_address, options) for _ in range(connections)]
    stubs = [pb_grpc.SchedulerServiceStub(c) for c in channels]
    # Health checks on a connection of their own, as a probe's would be.
    probe = grpc.aio.insecure_channel(cluster.api_address, options)
    health = health_pb2_grpc.HealthStub(probe)
    metadata = ((TENANT_METADATA, TENANT),)
    invalid = pb.ScheduleSpec()
    codes: collections.Counter[str] = collections.Counter()
    admitted_ms: list[float] = []
    refused_ms: list[float] = []
    hints: list[int] = []
    unhinted = 0
    health_ms: list[float] = []
    done = asyncio.Event()

    async def one(i: int) -> None:
        nonlocal unhinted
        request = pb.CreateScheduleRequest(
            key=f"x{factor}-{i}", spec=invalid if i % 10 == 0 else spec
        )
        started = time.perf_counter()
        try:
            await stubs[i % connections].CreateSchedule(request, metadata=metadata, timeout=120)
            codes["OK"] += 1
            admitted_ms.append((time.perf_counter() - started) * 1000)
        except grpc.aio.AioRpcError as exc:
            took = (time.perf_counter() - started) * 1000
            codes[exc.code().name] += 1
            if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                admitted_ms.append(took)
                return
            refused_ms.append(took)
            hint = refusal_hint_ms(exc)
            if hint is None:
                unhinted += 1
            else:
                hints.append(hint)

    async def checks() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
            health_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.05)

    monitor = ResourceMonitor(cluster.pids()).start()
    checking = asyncio.create_task(checks())
    started = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        await checking
        usage = await monitor.stop()
        for channel in [*channels, probe]:
            await channel.close()
    unclean = sum(v for k, v in codes.items() if k not in CLEAN) + unhinted
    return {
        "phase": f"burst {factor}x",
        "calls": n,
        "seconds": round(elapsed, 1),
        **{k.lower(): codes.get(k, 0) for k in sorted(CLEAN)},
        "unclean": unclean,
        "other_codes": {k: v for k, v in codes.items() if k not in CLEAN},
        "admitted_p50_ms": round(pct(admitted_ms, 0.5), 1),
        "admitted_p99_ms": round(pct(admitted_ms, 0.99), 1),
        "refused_p50_ms": round(pct(refused_ms, 0.5), 1),
        "refused_p99_ms": round(pct(refused_ms, 0.99), 1),
        "hint_p50_ms": pct(hints, 0.5) if hints else None,
        "hint_max_ms": max(hints) if hints else None,
        "health_max_ms": round(max(health_ms), 1) if health_ms else None,
        "api_cpu_s": usage["api"].cpu_s,
        "api_peak_rss_mb": usage["api"].peak_rss_mb,
    }


async def retried_burst(cluster: BenchCluster, spec: pb.ScheduleSpec, n: int) -> dict[str, Any]:
    async with cluster.client(timeout_s=600) as client:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(client.create(f"r-{i}", spec) for i in range(n)), return_exceptions=True
        )
        elapsed = time.perf_counter() - started
        failed = [r for r in results if isinstance(r, BaseException)]
        repeats = sum(1 for r in results if not isinstance(r, BaseException) and not r.created)
        found = 0
        for start in range(0, n, 500):
            again = await client.create_many(
                [(f"r-{i}", spec) for i in range(start, min(n, start + 500))]
            )
            found += sum(1 for r in again if not isinstance(r, Exception) and not r.created)
    return {
        "phase": "retried burst (typed client)",
        "calls": n,
        "seconds": round(elapsed, 1),
        "failed": len(failed),
        "failures": sorted({type(e).__name__ + ": " + str(e)[:80] for e in failed})[:3],
        "created_twice": repeats,
        "found_after": found,
        "ok_per_s": round(n / elapsed),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "overload",
        "machine": machine(),
        "max_in_flight": args.max_in_flight,
        "connections": args.connections,
    }
    spec = convert.spec_to_pb(far_spec())
    phases: list[dict[str, Any]] = []
    limit = {"CLOCKWORK_MAX_IN_FLIGHT": str(args.max_in_flight)}
    async with api_cluster("overload", args.shards, limit) as cluster:
        report["logs"] = str(cluster.run_dir)
        row = await capacity(cluster, spec, args.capacity_n, max(1, args.max_in_flight // 2))
        phases.append(row)
        print_table("overload", [row])
        for factor in args.factors:
            row = await burst(cluster, spec, factor, args.max_in_flight, args.connections)
            phases.append(row)
            print_table("overload", [row])
        row = await retried_burst(cluster, spec, args.retried_factor * args.max_in_flight)
        phases.append(row)
    report["phases"] = phases
    report["unclean"] = sum(p.get("unclean", 0) for p in phases)
    retried = phases[-1]
    report["retried_ok"] = (
        retried["failed"] == 0
        and retried["created_twice"] == 0
        and retried["found_after"] == retried["calls"]
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-in-flight", type=int, default=512)
    parser.add_argument(
        "--factors", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100]
    )
    parser.add_argument("--retried-factor", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--capacity-n", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    print_table("overload", report["phases"])
    print(f"unclean answers: {report['unclean']}; retried burst exact: {report['retried_ok']}")
    print(f"json: {write_json('overload', report, args.out)}")
    if report["unclean"] or not report["retried_ok"]:
        raise SystemExit("overload: unclean answers or a retried burst that did not land")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
