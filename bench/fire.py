"""Fire benchmark: preloaded one-shot schedules delivered to a fast HTTP sink (or
produced to a Kafka topic), against the raw limit of the same sink driven by a plain
load generator (aiohttp, or an aiokafka producer configured as a worker's).

Usage: python -m bench.fire [--m 200000] [--workers 1,2,3] [--window-s 10] [--burst]
                            [--burst-n 100000] [--burst-window-s 1]
                            [--warm-up 0.25] [--fixed-rate 1100,...] [--fixed-s 5]
                            [--gc-young-threshold 10000] [--target http|kafka]

With --target kafka (needs CLOCKWORK_KAFKA too), the schedules produce to a topic per
phase whose records carry the broker's append time, and the sink is a consumer of it:
a firing's lag is its append time minus its due time.

Needs CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD (scripts/bench.sh starts them). Starts
`clockwork api`, N `clockwork worker` processes (etcd shares the shards) and the sink
(bench/sink.py, its own process). First a warm-up: a quarter of the saturating
workload at the same rate (--warm-up, 0 to skip), reported as "warm-up" and left out
of the best rate (`bench.common.warm_up`). Then for each worker count: M one-shots
are created through the API, due over a short window starting after the preload ends
(saturating: the offered rate is well above what a worker delivers), and the run reports
deliveries/s, firing lag p50/p99/max (sink receive time minus due time), lost and
duplicated (the project's checker), and the api and worker CPU seconds and peak RSS
per 100k firings. Then, with the most workers: a steady run at half the measured rate
(the lag figure that matters), optionally the burst (--burst: 100k due in one
second), runs at fixed offered rates (--fixed-rate: lag at the same rate whatever
the saturating rate was, to compare settings) and the raw limits: the sink
driven by a plain aiohttp load generator, alone and with a durable scheduler's store
work per firing (bench/raw_durable.py: the least any Cassandra-backed scheduler does,
and the store work Clockwork does). The api and workers run with
--gc-young-threshold (clockwork_svc/gc_policy.py). A table on stdout; JSON and a PNG
in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench import analysis, durability, kafka_io, loadgen, plot, raw_durable
from bench.cluster import TENANT, BenchCluster, servers
from bench.common import (
    RESULTS_DIR,
    add_warm_up,
    machine,
    now_ms,
    print_table,
    ratio,
    warm_up,
    write_json,
)
from bench.resources import ResourceMonitor, Usage, cpu_per_100k, listening
from bench.sink import KafkaTopic, SinkProcess
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import identity, triggers
from clockwork_svc.domain.spec import ScheduleSpec, Target
from clockwork_svc.gc_policy import MAX_YOUNG_THRESHOLD, MIN_YOUNG_THRESHOLD, YOUNG_THRESHOLD
from e2e.workload import BatchCreate

PAYLOAD = b'{"bench":"fire","event":"reminder","note":"a small json payload"}'
BATCH = 500
BATCH_IN_FLIGHT = 4
_CREATE_TIMEOUT_S = 60.0
# The fastest preload seen so far; the first due time is set from it (with margin).
_MIN_LEAD_S = 8.0
_LEAD_HEADROOM = 1.6
"""The preload is given this many times its calibrated duration before the first due
time, so that its creates do not compete with the first deliveries (at 40,000
one-shots, 1.3 times lets the preload run 1.2 s into the due window)."""


@dataclass
class Workload:
    """One-shots to deliver: delivery id -> due time, and how the due times are laid."""

    n: int
    window_ms: int
    expected: dict[str, int]


async def _create(
    client: ClockworkClient, prefix: str, dues: list[int], target: Target, expected: dict[str, int]
) -> None:
    starts = iter(range(0, len(dues), BATCH))
    retried = 0

    async def caller() -> None:
        nonlocal retried
        for b in starts:
            due_of = {f"{prefix}-{i}": dues[i] for i in range(b, min(len(dues), b + BATCH))}
            entries = [
                (key, ScheduleSpec(triggers.OnceTrigger(due), target, payload=PAYLOAD))
                for key, due in due_of.items()
            ]
            # Entries answered UNAVAILABLE (a Cassandra write timeout under load) are
            # sent again with the same keys, as a client would.
            creating = BatchCreate(client, entries, _CREATE_TIMEOUT_S)
            async for key, schedule_id, _ in creating.acknowledgements():
                expected[identity.delivery_id(schedule_id, due_of[key])] = due_of[key]
            retried += creating.retried

    await asyncio.gather(*(caller() for _ in range(BATCH_IN_FLIGHT)))
    if retried:
        print(f"preload: {retried} create calls failed (wholly or in part) and were retried")


async def preload(
    client: ClockworkClient, prefix: str, n: int, window_ms: int, target: Target
) -> Workload:
    """Create n one-shots due evenly over `window_ms`, starting just after the preload
    can finish (its rate measured on a first slice of far-future schedules)."""
    calibration = max(50, min(2000, n // 10))
    started = time.perf_counter()
    far = now_ms() + 86_400_000
    await _create(client, f"{prefix}-cal", [far] * calibration, target, {})
    rate = calibration / (time.perf_counter() - started)
    lead_ms = int(max(_MIN_LEAD_S, _LEAD_HEADROOM * n / rate + 3) * 1000)
    first_due = now_ms() + lead_ms
    dues = [first_due + (i * window_ms) // n for i in range(n)]
    expected: dict[str, int] = {}
    await _create(client, prefix, dues, target, expected)
    late = now_ms() - first_due
    if late > 0:
        print(f"warning: preload ended {late} ms after the first due time (lag includes it)")
    return Workload(n, window_ms, expected)


def best_saturating_rate(runs: list[dict[str, Any]]) -> float:
    """The best deliveries/s of the saturating runs: the warm-up, half-rate and burst
    rows are not compared with the raw HTTP limit."""
    return max(float(r["deliveries_per_s"]) for r in runs if r["run"].startswith("saturate-"))


def _sink(run_dir: Path, label: str, kafka: str | None) -> SinkProcess:
    """The HTTP sink, or with `kafka` (the brokers) the consumer of a topic of its own."""
    topic = None if kafka is None else KafkaTopic(kafka, f"bench-{label}-{uuid.uuid4().hex[:8]}")
    return SinkProcess(run_dir / f"{label}.arrivals", topic)


async def deliver_phase(
    cluster: BenchCluster,
    run_dir: Path,
    label: str,
    n: int,
    window_ms: int,
    timeout_s: float,
    kafka: str | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Preload n one-shots due over window_ms, wait for them, judge the deliveries
    (to the HTTP sink, or with `kafka` to a topic on those brokers)."""
    sink = await _sink(run_dir, label, kafka).start()
    try:
        async with cluster.client() as client:
            work = await preload(client, label, n, window_ms, sink.target())
        first_due = min(work.expected.values())
        await asyncio.sleep(max(0.0, (first_due - now_ms()) / 1000))
        # Cassandra and the sink share the two cores with the workers: their CPU per
        # firing says where the machine's time goes.
        pids = cluster.pids() | {"sink": sink.pid} | _servers(cluster, kafka)
        monitor = ResourceMonitor(pids).start()
        await sink.wait_for(n, timeout_s=timeout_s + window_ms / 1000, idle_s=60.0)
        await asyncio.sleep(1.0)  # stragglers (duplicates) before judging
        usage = await monitor.stop()
        arrivals = await sink.arrivals()
    finally:
        await sink.stop()
    row: dict[str, Any] = {
        "run": label,
        "workers": len(cluster.workers),
        "n": n,
        "window_s": window_ms / 1000,
    }
    row |= analysis.judge(work.expected, arrivals)
    worker_cpu = sum(u.cpu_s for name, u in usage.items() if name.startswith("worker"))
    shares = {"worker": Usage(worker_cpu, 0.0)}
    shares |= {name: usage[name] for name in ("cassandra", "kafka", "sink") if name in usage}
    row |= cpu_per_100k(shares, row["received"])
    row["api_cpu_s"] = usage["api"].cpu_s if "api" in usage else None
    row["worker_peak_rss_mb"] = max(
        (u.peak_rss_mb for name, u in usage.items() if name.startswith("worker")), default=0.0
    )
    return row, analysis.series(work.expected, arrivals)


def _servers(cluster: BenchCluster, kafka: str | None) -> dict[str, int]:
    """The harness's Cassandra process, and Kafka's when it is the target, when they
    run on this machine."""
    return listening({"cassandra": cluster.env["CLOCKWORK_CASSANDRA"], "kafka": kafka})


async def raw_limit(
    run_dir: Path, n: int, concurrency: int, kafka: str | None = None
) -> dict[str, Any]:
    """The sink driven with no scheduler: aiohttp POSTs, or with `kafka` a producer
    configured as a worker's, `concurrency` in flight."""
    sink = await _sink(run_dir, "raw", kafka).start()
    try:
        ids = [f"msg_raw{i:012x}" for i in range(n)]
        pids = {"driver": os.getpid(), "sink": sink.pid} | listening({"kafka": kafka})
        monitor = ResourceMonitor(pids).start()
        if sink.kafka is None:
            per_s = await loadgen.blast(f"{sink.url}/fire", PAYLOAD, ids, concurrency)
            name = "aiohttp"
        else:
            topic = sink.kafka
            per_s = await kafka_io.blast(topic.bootstrap, topic.topic, PAYLOAD, ids, concurrency)
            name = "aiokafka"
            await sink.wait_for(n, timeout_s=60.0)
        usage = await monitor.stop()
        arrivals = await sink.arrivals()
    finally:
        await sink.stop()
    return {
        "run": f"raw {name} c={concurrency}",
        "n": n,
        "deliveries_per_s": round(per_s, 1),
        "received": len(arrivals),
    } | cpu_per_100k(usage, len(arrivals))


async def raw_durable_limits(
    cluster: BenchCluster,
    run_dir: Path,
    schedule_keys: list[str],
    concurrency: int,
    kafka: str | None = None,
) -> list[dict[str, Any]]:
    """The raw limit plus a durable scheduler's store work per firing, at each of
    `bench.raw_durable.LEVELS`, over the same firings as the raw limit."""
    found = []
    for level in raw_durable.LEVELS:
        sink = await _sink(run_dir, f"raw-{level}", kafka).start()
        try:
            row = await raw_durable.limit(
                level,
                cluster.cassandra,
                cluster.keyspace,
                cluster.shards,
                TENANT,
                schedule_keys,
                sink.target(),
                kafka,
                PAYLOAD,
                concurrency,
                {"sink": sink.pid} | _servers(cluster, kafka),
            )
            if sink.kafka is not None:
                await sink.wait_for(len(schedule_keys), timeout_s=60.0)
            row["received"] = len(await sink.arrivals())
        finally:
            await sink.stop()
        print_table("fire: raw limit with a durable scheduler's store work", [row])
        found.append(row)
    return found


async def with_cluster(
    shards: int,
    max_concurrent: int,
    body: Callable[[BenchCluster, Path], Awaitable[None]],
    gc_young_threshold: int = YOUNG_THRESHOLD,
    kafka: str | None = None,
) -> Path:
    run_dir = Path(tempfile.mkdtemp(prefix="bench-fire-"))
    cluster = BenchCluster(
        run_dir,
        shards=shards,
        max_concurrent_deliveries=max_concurrent,
        gc_young_threshold=gc_young_threshold,
    )
    if kafka is not None:
        cluster.env["CLOCKWORK_KAFKA"] = kafka  # the workers' producers
    await cluster.migrate()
    await cluster.start_api()
    try:
        await body(cluster, run_dir)
    finally:
        await cluster.stop()
    return run_dir


def kafka_brokers(target: str) -> str | None:
    """The harness's Kafka when the target is Kafka (None for HTTP)."""
    if target == "http":
        return None
    brokers = os.environ.get("CLOCKWORK_KAFKA", "")
    if not brokers:
        sys.exit("--target kafka needs CLOCKWORK_KAFKA: python -m e2e.infra up kafka")
    return brokers


async def run(args: argparse.Namespace) -> dict[str, Any]:
    kafka = kafka_brokers(args.target)
    report: dict[str, Any] = {
        "benchmark": "fire",
        "target": args.target,
        "machine": machine(),
        "durability": (await durability.of_cassandra(servers()[0])).cassandra(),
        "m": args.m,
        "shards": args.shards,
        "gc_young_threshold": args.gc_young_threshold,
        "runs": [],
    }
    plots: dict[str, dict[str, list[float]]] = {}
    timeout_s = args.timeout_s

    async def body(cluster: BenchCluster, run_dir: Path) -> None:
        report["logs"] = str(run_dir)

        async def phase(label: str, n: int, window_ms: int, plot: str | None) -> None:
            """One delivery phase: reported, printed, and plotted under `plot`."""
            row, s = await deliver_phase(cluster, run_dir, label, n, window_ms, timeout_s, kafka)
            report["runs"].append(row)
            if plot is not None:
                plots[plot] = s
            print_table("fire", [row])

        if args.warm_up > 0:
            await cluster.start_workers(args.workers[0])
            await phase("warm-up", *warm_up(args.m, args.window_s * 1000, args.warm_up), None)
        for count in args.workers:
            await cluster.stop_workers()
            await cluster.start_workers(count)
            await phase(
                f"saturate-w{count}", args.m, args.window_s * 1000, f"{count} worker(s), saturating"
            )
        workers = len(cluster.workers)
        half = max(1.0, best_saturating_rate(report["runs"]) / 2)
        steady_n = max(100, int(half * args.steady_s))
        await phase(
            "half-rate", steady_n, int(steady_n / half * 1000), f"{workers} worker(s), half rate"
        )
        for rate in args.fixed_rate:
            n = max(10, int(rate * args.fixed_s))
            await phase(
                f"fixed-{rate:g}-per-s", n, int(n / rate * 1000), f"{workers} worker(s), {rate:g}/s"
            )
        if args.burst:
            await phase("burst", args.burst_n, int(args.burst_window_s * 1000), "burst")
        report["raw"] = await raw_limit(run_dir, args.m, args.raw_concurrency, kafka)
        # Real schedules for the clockwork-store level to read: the last saturating run's.
        keys = [f"saturate-w{args.workers[-1]}-{i}" for i in range(args.m)]
        report["raw_durable"] = await raw_durable_limits(
            cluster, run_dir, keys, args.raw_concurrency, kafka
        )

    await with_cluster(args.shards, args.max_concurrent, body, args.gc_young_threshold, kafka)
    best = best_saturating_rate(report["runs"])
    report["best_clockwork_per_s"] = best
    report["raw_per_s"] = report["raw"]["deliveries_per_s"]
    report["ratio_clockwork_to_raw"] = ratio(best, report["raw"]["deliveries_per_s"])
    durable = {r["level"]: r["deliveries_per_s"] for r in report["raw_durable"]}
    # The ceiling of any scheduler that keeps its firings in Cassandra, on this machine:
    report["ratio_minimal_durable_to_raw"] = ratio(
        durable["minimal"], report["raw"]["deliveries_per_s"]
    )
    # How much of the rate its own store work allows the scheduler reaches:
    report["ratio_clockwork_to_clockwork_store"] = ratio(best, durable["clockwork-store"])
    out = args.out or RESULTS_DIR
    report["plot"] = str(plot.lag_and_throughput(plots, out / "fire.png"))
    report["series"] = plots
    return report


def _young_threshold(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if not MIN_YOUNG_THRESHOLD <= value <= MAX_YOUNG_THRESHOLD:
        raise argparse.ArgumentTypeError(
            f"must be {MIN_YOUNG_THRESHOLD} to {MAX_YOUNG_THRESHOLD}, not {value}"
        )
    return value


def add_gc_young_threshold(parser: argparse.ArgumentParser) -> None:
    """`--gc-young-threshold`, checked against the workers' own bounds before any server
    starts (rather than a worker crash-looping on it)."""
    parser.add_argument(
        "--gc-young-threshold",
        type=_young_threshold,
        default=YOUNG_THRESHOLD,
        help="the api's and workers' --gc-young-threshold",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    floats = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
    parser.add_argument("--m", type=int, default=200_000, help="one-shots per saturating run")
    parser.add_argument("--workers", type=ints, default=[1, 2, 3])
    parser.add_argument("--window-s", type=int, default=10, help="due window of a saturating run")
    parser.add_argument("--steady-s", type=float, default=30, help="length of the half-rate run")
    add_warm_up(parser)
    parser.add_argument(
        "--fixed-rate",
        type=floats,
        default=[],
        help="also runs at these offered rates (firings/s, comma-separated)",
    )
    parser.add_argument("--fixed-s", type=float, default=5, help="length of a fixed-rate run")
    add_gc_young_threshold(parser)
    parser.add_argument("--burst", action="store_true", help="also 100k due in one second")
    parser.add_argument("--burst-n", type=int, default=100_000)
    parser.add_argument("--burst-window-s", type=float, default=1.0, help="burst due within")
    parser.add_argument(
        "--target",
        choices=("http", "kafka"),
        default="http",
        help="deliver to the HTTP sink, or produce to the harness's Kafka (CLOCKWORK_KAFKA)",
    )
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--max-concurrent", type=int, default=512, help="per worker")
    parser.add_argument("--raw-concurrency", type=int, default=512)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    if any(rate <= 0 for rate in args.fixed_rate):
        parser.error("--fixed-rate: every rate must be above 0")
    report = uvloop.run(run(args))
    raw = "raw HTTP" if args.target == "http" else "raw Kafka"
    print_table(f"fire: Clockwork vs {raw}", [*report["runs"], report["raw"]])
    print_table("fire: raw limits", [report["raw"], *report["raw_durable"]])
    print(f"\nratio best Clockwork / {raw} = {report['ratio_clockwork_to_raw']}")
    print(
        f"ratio raw + minimal durable store work / {raw} = {report['ratio_minimal_durable_to_raw']}"
    )
    print(
        "ratio best Clockwork / raw + Clockwork's store work "
        f"= {report['ratio_clockwork_to_clockwork_store']}"
    )
    print(f"durability: {report['durability']}")
    print(f"gc young threshold: {report['gc_young_threshold']}")
    print(f"json: {write_json('fire', report, args.out)}  plot: {report['plot']}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
