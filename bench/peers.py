"""Peers benchmark: the fire workload on Clockwork, Celery (ETA tasks on a Redis broker)
and APScheduler 3 (SQLAlchemy job store on SQLite), same machine, same run, same sink.

Usage: python -m bench.peers [--m 20000] [--window-s 10] [--light-rate 100]
                             [--warm-up 0.25] [--gc-young-threshold 10000]

For each scheduler: a warm-up (a quarter of the saturating run, same rate, reported
but not compared; --warm-up sets the fraction, 0 skips it), a saturating run (M
one-shots due over a short window) for throughput, and a light run (--light-rate
firings/s for --light-s seconds) for lag when not overloaded. Every firing POSTs the
same payload and headers to the same sink (bench/sink.py); the checker counts lost and
duplicated. Needs the `bench` extras and `redis-server` (scripts/bench.sh installs
both) and CLOCKWORK_CASSANDRA/CLOCKWORK_ETCD.
Clockwork's api and workers run with --gc-young-threshold (as in bench.fire).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from bench import analysis, durability, fire
from bench.cluster import BenchCluster, servers
from bench.common import (
    add_warm_up,
    free_port,
    machine,
    now_ms,
    print_table,
    warm_up,
    write_json,
)
from bench.sink import SinkProcess

Runner = Callable[[Path, str, int, int], Awaitable[dict[str, Any]]]


async def _judged(
    label: str, sink: SinkProcess, expected: dict[str, int], timeout_s: float
) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, (min(expected.values()) - now_ms()) / 1000))
    await sink.wait_for(len(expected), timeout_s=timeout_s, idle_s=60.0)
    await asyncio.sleep(1.0)
    row: dict[str, Any] = {"scheduler": label, "n": len(expected)}
    return row | analysis.judge(expected, await sink.arrivals())


class Celery:
    """redis-server and a Celery worker, as child processes. Redis keeps an append-only
    file synced as `appendfsync` says (bench.durability matches it to Cassandra's)."""

    def __init__(self, run_dir: Path, concurrency: int, appendfsync: str) -> None:
        self.run_dir = run_dir
        self.concurrency = concurrency
        self.appendfsync = appendfsync
        self.redis_port = free_port()
        self._procs: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        redis = shutil.which("redis-server")
        if redis is None:
            raise RuntimeError("redis-server not installed (scripts/bench.sh installs it)")
        log = (self.run_dir / "redis.log").open("ab")
        self._procs.append(
            await asyncio.create_subprocess_exec(
                redis,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.run_dir),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                stdout=log,
                stderr=log,
            )
        )
        os.environ["BENCH_REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"
        log = (self.run_dir / "celery.log").open("ab")
        self._procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.peer_celery",
                "worker",
                "--loglevel",
                "WARNING",
                "--pool",
                "prefork",
                "--concurrency",
                str(self.concurrency),
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                stdout=log,
                stderr=log,
                env={**os.environ},
            )
        )
        from bench import peer_celery

        for _ in range(120):
            replies = await asyncio.to_thread(peer_celery.app.control.ping, timeout=1.0)
            if replies:
                return
        raise TimeoutError("celery worker did not answer a ping")

    async def run(self, run_dir: Path, label: str, n: int, window_ms: int) -> dict[str, Any]:
        from bench import peer_celery

        sink = await SinkProcess(run_dir / f"celery-{label}.arrivals").start()
        url = f"{sink.url}/fire"

        def enqueue(prefix: str, dues: list[int]) -> dict[str, int]:
            expected = {}
            for i, due in enumerate(dues):
                delivery_id = f"{prefix}-{i}"
                eta = dt.datetime.fromtimestamp(due / 1000, tz=dt.UTC)
                peer_celery.post.apply_async((url, fire.PAYLOAD, delivery_id), eta=eta)
                expected[delivery_id] = due
            return expected

        try:
            calibration = max(20, min(1000, n // 10))
            started = time.perf_counter()
            await asyncio.to_thread(enqueue, f"cal-{label}", [now_ms() + 86_400_000] * calibration)
            rate = calibration / (time.perf_counter() - started)
            first = now_ms() + int(max(5.0, 1.3 * n / rate + 3) * 1000)
            dues = [first + (i * window_ms) // n for i in range(n)]
            expected = await asyncio.to_thread(enqueue, label, dues)
            return await _judged("celery", sink, expected, 900)
        finally:
            await sink.stop()

    async def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def apscheduler_run(run_dir: Path, label: str, n: int, window_ms: int) -> dict[str, Any]:
    sink = await SinkProcess(run_dir / f"aps-{label}.arrivals").start()
    log = (run_dir / f"aps-{label}.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.peer_apscheduler",
        "--db",
        str(run_dir / f"aps-{label}.db"),
        "--url",
        f"{sink.url}/fire",
        "--n",
        str(n),
        "--window-ms",
        str(window_ms),
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 1800)).decode()
        if not line.startswith("FIRST_DUE "):
            raise RuntimeError(f"apscheduler peer failed (see {log.name})")
        first = int(line.split()[1])
        expected = {f"aps-{i}": first + (i * window_ms) // n for i in range(n)}
        return await _judged("apscheduler", sink, expected, 900)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        await sink.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    stores = await durability.of_cassandra(servers()[0])
    report: dict[str, Any] = {
        "benchmark": "peers",
        "machine": machine(),
        "durability": stores.describe(),
        "m": args.m,
        "window_s": args.window_s,
        "gc_young_threshold": args.gc_young_threshold,
        "logs": str(run_dir),
        "runs": [],
    }
    light_n = max(10, int(args.light_rate * args.light_s))
    # Each scheduler first runs a warm-up (bench.common.warm_up), reported as such: no
    # scheduler should be measured cold.
    workloads = [
        ("saturate", args.m, args.window_s * 1000),
        ("light", light_n, int(args.light_s * 1000)),
    ]
    if args.warm_up > 0:
        workloads.insert(0, ("warm-up", *warm_up(args.m, args.window_s * 1000, args.warm_up)))

    async def clockwork(cluster: BenchCluster, _: Path) -> None:
        await cluster.start_workers(args.workers)
        for label, n, window_ms in workloads:
            row, _series = await fire.deliver_phase(
                cluster, run_dir, f"cw-{label}", n, window_ms, 900
            )
            report["runs"].append({"scheduler": "clockwork", "workload": label, **row})

    await fire.with_cluster(args.shards, 512, clockwork, args.gc_young_threshold)
    celery = Celery(run_dir, args.celery_concurrency, stores.redis_appendfsync)
    await celery.start()
    try:
        for label, n, window_ms in workloads:
            row = await celery.run(run_dir, label, n, window_ms)
            report["runs"].append({"workload": label, **row})
    finally:
        await celery.stop()
    for label, n, window_ms in workloads:
        row = await apscheduler_run(run_dir, label, n, window_ms)
        report["runs"].append({"workload": label, **row})
    return report


COLUMNS = (
    "scheduler",
    "workload",
    "n",
    "received",
    "lost",
    "duplicated",
    "deliveries_per_s",
    "lag_p50_ms",
    "lag_p99_ms",
    "lag_max_ms",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=20_000, help="one-shots per saturating run")
    parser.add_argument("--window-s", type=int, default=10)
    parser.add_argument("--light-rate", type=float, default=100, help="firings/s, light run")
    parser.add_argument("--light-s", type=float, default=20)
    parser.add_argument("--workers", type=int, default=1, help="Clockwork workers")
    add_warm_up(parser)
    parser.add_argument("--celery-concurrency", type=int, default=8)
    parser.add_argument("--shards", type=int, default=64)
    fire.add_gc_young_threshold(parser)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    print_table("peers", [{k: r.get(k, "-") for k in COLUMNS} for r in report["runs"]])
    print(f"durability: {report['durability']}")
    print(f"Clockwork's gc young threshold: {report['gc_young_threshold']}")
    print(f"json: {write_json('peers', report, args.out)}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
