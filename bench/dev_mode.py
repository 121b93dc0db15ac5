"""Benchmark `clockwork dev`: firing lag (one-shot, interval, cron) and create rate.

Usage: python -m bench.dev_mode [--creates N] [--cron] [--json PATH]

Starts a real `clockwork dev` process on a fresh data dir and a callback receiver in
this process, then measures:
- one-shot lag: receive time minus due time, for schedules created 1-3 s ahead;
- immediate lag: a one-shot due 100 ms after its create call returns;
- interval regularity: gaps between deliveries of an `every 1s` schedule;
- cron: lag of a `* * * * *` schedule at the next minute boundary (with --cron);
- create rate: unary creates at several concurrencies, and batched creates.
Figures are printed as a table and as JSON. Not a timed test: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiohttp import web

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Receiver:
    def __init__(self) -> None:
        self.arrivals: dict[str, list[int]] = defaultdict(list)
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def handle(request: web.Request) -> web.Response:
            self.arrivals[request.path].append(now_ms())
            await request.read()
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def wait(self, path: str, count: int, timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while len(self.arrivals[path]) < count and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return self.arrivals[path]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def once(url: str, at_ms: int) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(at_ms), HttpTarget(url), payload=b"{}")


async def measure_lag(client: ClockworkClient, rx: Receiver, n: int) -> dict[str, float]:
    dues = {}
    for i in range(n):
        due = now_ms() + 1000 + (i * 2000) // n
        dues[f"/lag{i}"] = due
        await client.create(f"lag-{i}", once(rx.url(f"/lag{i}"), due))
    lags: list[float] = []
    for path, due in dues.items():
        [arrived, *_] = await rx.wait(path, 1, 10)
        lags.append(arrived - due)
    return {"n": n, "p50_ms": pct(lags, 0.5), "p99_ms": pct(lags, 0.99), "max_ms": max(lags)}


async def measure_immediate(client: ClockworkClient, rx: Receiver, n: int) -> dict[str, float]:
    lags: list[float] = []
    for i in range(n):
        response_due = now_ms() + 100
        await client.create(f"now-{i}", once(rx.url(f"/now{i}"), response_due))
        [arrived, *_] = await rx.wait(f"/now{i}", 1, 10)
        lags.append(arrived - response_due)
    return {"n": n, "p50_ms": pct(lags, 0.5), "max_ms": max(lags)}


async def measure_interval(client: ClockworkClient, rx: Receiver, n: int) -> dict[str, float]:
    spec = ScheduleSpec(triggers.IntervalTrigger(1000, count=n), HttpTarget(rx.url("/every")))
    await client.create("every-1s", spec)
    arrivals = await rx.wait("/every", n, n + 10)
    gaps = [float(b - a) for a, b in itertools.pairwise(arrivals)]
    return {
        "deliveries": len(arrivals),
        "gap_mean_ms": statistics.mean(gaps),
        "gap_stdev_ms": statistics.pstdev(gaps),
        "gap_max_ms": max(gaps),
    }


async def measure_cron(client: ClockworkClient, rx: Receiver) -> dict[str, float]:
    spec = ScheduleSpec(triggers.CronTrigger("* * * * *", "UTC"), HttpTarget(rx.url("/cron")))
    await client.create("cron-minute", spec)
    minute = (now_ms() // 60_000 + 1) * 60_000
    [arrived, *_] = await rx.wait("/cron", 1, 75)
    return {"minute_boundary_lag_ms": arrived - minute}


async def _create_concurrently(
    client: ClockworkClient,
    spec: ScheduleSpec,
    prefix: str,
    n: int,
    concurrency: int,
    latencies: list[float],
) -> None:
    keys = iter(range(n))

    async def worker() -> None:
        for i in keys:
            started = time.perf_counter()
            await client.create(f"{prefix}-{i}", spec)
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def measure_creates(client: ClockworkClient, rx: Receiver, n: int) -> dict[str, Any]:
    far = now_ms() + 86_400_000
    spec = once(rx.url("/never"), far)
    results: dict[str, Any] = {}
    for concurrency in (1, 16, 64):
        latencies: list[float] = []
        started = time.perf_counter()
        await _create_concurrently(client, spec, f"c{concurrency}", n, concurrency, latencies)
        elapsed = time.perf_counter() - started
        results[f"unary_c{concurrency}"] = {
            "per_s": n / elapsed,
            "p50_ms": pct(latencies, 0.5),
            "p99_ms": pct(latencies, 0.99),
        }
    batch = 500
    started = time.perf_counter()
    for b in range(0, n, batch):
        await client.create_many([(f"batch-{i}", spec) for i in range(b, min(n, b + batch))])
    results[f"batch_{batch}"] = {"per_s": n / (time.perf_counter() - started)}
    return results


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rx = Receiver()
    await rx.start()
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="clockwork-bench-"))
    log = (data / "dev.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "clockwork_svc",
        "dev",
        "--data-dir",
        str(data),
        "--listen",
        f"127.0.0.1:{port}",
        "--ops-listen",
        "127.0.0.1:0",
        "--http-listen",
        "off",
        stdout=log,
        stderr=log,
        env={**os.environ, "CLOCKWORK_LOG_LEVEL": "WARNING"},
    )
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} cores"}
    try:
        settings = ClientSettings(f"127.0.0.1:{port}", tenant="bench")
        async with ClockworkClient(settings) as client:
            for _ in range(100):
                try:
                    await client.list(1)
                    break
                except Exception:  # noqa: BLE001 - waiting for the server to come up
                    await asyncio.sleep(0.1)
            report["one_shot_lag"] = await measure_lag(client, rx, args.lag_samples)
            report["immediate_lag"] = await measure_immediate(client, rx, 10)
            report["every_1s"] = await measure_interval(client, rx, 10)
            if args.cron:
                report["cron"] = await measure_cron(client, rx)
            report["create_rate"] = await measure_creates(client, rx, args.creates)
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        await rx.stop()
    return report


def print_table(report: dict[str, Any]) -> None:
    for section, values in report.items():
        if isinstance(values, dict):
            for name, value in values.items():
                shown = (
                    {k: round(v, 1) for k, v in value.items()}
                    if isinstance(value, dict)
                    else round(value, 1)
                )
                print(f"{section:14} {name:22} {shown}")
        else:
            print(f"{section:14} {values}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--lag-samples", type=int, default=30)
    parser.add_argument("--cron", action="store_true", help="also wait for a minute boundary")
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print_table(result)
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2))
