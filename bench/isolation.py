"""Tenant isolation benchmark: one tenant's endpoint hangs; another tenant's firing lag,
alone and beside it, side by side in one run.

Usage: python -m bench.isolation [--rate 200] [--window-s 30] [--hold-s 30]
                                 [--slots 64] [--shares 0.5,1]

One api and one worker (`--max-concurrent-deliveries --slots`) on a fresh keyspace of
the harness's Cassandra. For each `--max-tenant-share` in `--shares` (the worker
restarted with it), two phases:

1. alone: tenant "bench" has `--rate` one-shots a second due over `--window-s`, to
   the benchmark's HTTP sink (its own process);
2. beside a hung tenant: the same, while tenant "hung" has twice `--slots` one-shots
   due over the first quarter of the window to an endpoint that holds every request
   without answering; its target timeout is `--hold-s`, so each of its deliveries
   holds a slot that long, then its retry takes one again.

Reported per phase: the steady tenant's lag p50/p99/max (receive minus due, ms) and
how many of its firings had not arrived by the end of the wait (window + 2 x hold +
60 s), and how many distinct deliveries of the hung tenant reached its endpoint (at
most the slots its share allows in any `--hold-s`).
With the share below 1 the steady tenant's lag beside the hung one stays near its lag
alone; at 1 (no isolation) it waits for the hung deliveries to time out. A table on
stdout, JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import uvloop

from bench import analysis, fire
from bench.cluster import BenchCluster
from bench.common import machine, now_ms, print_table, write_json
from bench.sink import SinkProcess
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain.spec import HttpTarget
from e2e.sink import RecordingSink

_CREATE_RATE = 400  # creates/s assumed when placing the first due time


async def phase(
    cluster: BenchCluster,
    args: argparse.Namespace,
    label: str,
    hung: RecordingSink | None,
    hung_tenant: str = "",
) -> dict[str, Any]:
    n = int(args.rate * args.window_s)
    m = 2 * args.slots if hung is not None else 0
    window_ms = int(args.window_s * 1000)
    first_due = now_ms() + int((3 + (n + m) / _CREATE_RATE) * 1000)
    sink = await SinkProcess(cluster.run_dir / f"{label}.arrivals").start()
    try:
        if hung is not None:
            target = HttpTarget(hung.url + "/hung", timeout_ms=int(args.hold_s * 1000))
            dues = [first_due + i * (window_ms // 4) // m for i in range(m)]
            settings = ClientSettings(cluster.api_address, tenant=hung_tenant, timeout_s=120)
            async with ClockworkClient(settings) as client:
                await fire._create(client, f"{label}-h", dues, target, {})
        expected: dict[str, int] = {}
        dues = [first_due + i * window_ms // n for i in range(n)]
        async with cluster.client() as client:
            await fire._create(client, label, dues, sink.target(), expected)
        late = now_ms() - first_due
        if late > 0:
            print(f"warning: {label}: creates ended {late} ms after the first due time")
        # A lull as long as a held slot (share 1) is not the end of the deliveries.
        idle_s = 2 * args.hold_s + 10
        await sink.wait_for(n, timeout_s=args.window_s + 2 * args.hold_s + 60, idle_s=idle_s)
        await asyncio.sleep(1.0)
        arrivals = await sink.arrivals()
    finally:
        await sink.stop()
    judged = analysis.judge(expected, arrivals)
    return {
        "share": cluster.env["CLOCKWORK_MAX_TENANT_SHARE"],
        "phase": label.split("-", 1)[1].replace("-", " "),
        "n": n,
        # Not received by the end of the wait (a starved tenant's firings are late, not
        # gone: they are still due in the store).
        "not_arrived": judged["lost"],
        "lag_p50_ms": judged["lag_p50_ms"],
        "lag_p99_ms": judged["lag_p99_ms"],
        "lag_max_ms": judged["lag_max_ms"],
        # The hung tenant's deliveries that reached its endpoint: at most its slots in
        # any --hold-s, as none is answered sooner.
        "hung_reached": len({r.delivery_id for r in hung.received}) if hung else None,
    }


async def _cancel_all(cluster: BenchCluster, tenant: str) -> None:
    """Cancel every schedule of `tenant` (its retries would go on into the next run)."""
    settings = ClientSettings(cluster.api_address, tenant=tenant, timeout_s=120)
    async with ClockworkClient(settings) as client:
        keys = [s.key async for s in client.list_all()]
        # Best effort: one that finished meanwhile cannot be cancelled, and needs not be.
        await asyncio.gather(*(client.cancel(key) for key in keys), return_exceptions=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "isolation",
        "machine": machine(),
        "rate": args.rate,
        "window_s": args.window_s,
        "hold_s": args.hold_s,
        "slots": args.slots,
    }
    rows: list[dict[str, Any]] = []

    async def body(cluster: BenchCluster, run_dir: Path) -> None:
        report["logs"] = str(run_dir)
        for share in args.shares:
            cluster.env["CLOCKWORK_MAX_TENANT_SHARE"] = str(share)
            await cluster.start_workers(1)
            s = f"{share:g}".replace(".", "")
            rows.append(await phase(cluster, args, f"s{s}-alone", None))
            print_table("isolation", rows[-1:])
            hung = await RecordingSink().start()
            hung.hang()
            tenant = f"hung-s{s}"  # a tenant per share: the last one's retries stay apart
            try:
                label = f"s{s}-beside-hung-tenant"
                rows.append(await phase(cluster, args, label, hung, tenant))
                print_table("isolation", rows[-1:])
            finally:
                await hung.stop()  # lets the held requests go (their connections drop)
                await _cancel_all(cluster, tenant)
                await cluster.stop_workers()

    await fire.with_cluster(args.shards, args.slots, body)
    report["rows"] = rows
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="steady firings per second")
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--hold-s", type=float, default=30.0, help="the hung target's timeout")
    parser.add_argument("--slots", type=int, default=64, help="--max-concurrent-deliveries")
    parser.add_argument(
        "--shares", type=lambda s: [float(x) for x in s.split(",")], default=[0.5, 1.0]
    )
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    print_table("isolation", report["rows"])
    print(f"json: {write_json('isolation', report, args.out)}")


if __name__ == "__main__":
    os.environ.setdefault("CLOCKWORK_LOG_LEVEL", "WARNING")
    main()
