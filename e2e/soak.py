"""Soak: a steady load on a real cluster with periodic nemeses, judged by the checker.

    python -m e2e.soak --minutes 60 --rate 50 --seed 7

needs CLOCKWORK_CASSANDRA (``set -a; . .infra/env; set +a`` after ``python -m e2e.infra
up cassandra etcd``). It starts its own etcd member in a temporary state dir (the
nemeses restart it), an in-process recording sink, one api and ``--workers`` workers
on a fresh keyspace, then for ``--minutes``:

* keeps about ``--rate`` firings per second due: a quarter from interval and cron
  schedules created up front (running until the end), the rest one-shots created every
  two seconds, due three to five seconds later;
* every ``--nemesis-every`` seconds runs the next nemesis in turn: kill -9 a worker
  (and start a replacement), SIGSTOP a worker past its lease then resume it, kill -9
  etcd and restart it;

and at the end waits for the stragglers and prints the checker's report (a table, then
JSON; also written to ``--json-out``). Exit status 1 if anything was lost or delivered
unexpectedly. The long mode is the same command with hours of ``--minutes`` (not run in
CI; the sink keeps every request in memory, about 1 KiB each). CI runs a short mode
(tests/nemesis/test_soak.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from clockwork_svc.client import ClockworkClient
from e2e.checker import Report, Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.infra import Running
from e2e.infra import etcd as etcd_server
from e2e.sink import RecordingSink
from e2e.workload import Workload

TICK_S = 2.0
LEAD_MS = 3_000
RECURRING_SHARE = 0.25
MEAN_INTERVAL_RATE = (1 / 2 + 1 / 3 + 1 / 5) / 3  # firings per second of one interval schedule
NEMESES = ("kill -9 worker", "SIGSTOP worker", "restart etcd")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--rate", type=float, default=20.0, help="firings due per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--nemesis-every", type=float, default=30.0, help="seconds")
    parser.add_argument("--lease-ttl", type=int, default=4)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--run-dir", type=Path, help="logs (default: a temporary directory)")
    parser.add_argument("--json-out", type=Path, help="also write the JSON report here")
    return parser


class Soak:
    def __init__(self, args: argparse.Namespace, run_dir: Path, etcd: Running) -> None:
        self.args = args
        self.run_dir = run_dir
        self.etcd = etcd
        self.sink = RecordingSink()
        self.cluster = Cluster(
            run_dir,
            os.environ["CLOCKWORK_CASSANDRA"],
            etcd.address,
            shards=args.shards,
            lease_ttl=args.lease_ttl,
            log_level="WARNING",
        )
        self.workload: Workload | None = None
        self.windows: list[Window] = []

    async def run(self) -> Report:
        args = self.args
        await self.sink.start()
        try:
            await self.cluster.start(args.workers)
            self.workload = Workload(args.seed, self.sink.url, prefix="soak")
            t0 = now_ms()
            end_ms = t0 + int(args.minutes * 60_000)
            async with self.cluster.client(timeout_s=60) as client:
                recurring = max(1, round(args.rate * RECURRING_SHARE / MEAN_INTERVAL_RATE))
                base = self.workload.generate(recurring, t0 + LEAD_MS, end_ms, kinds=("interval",))
                base += self.workload.generate(2, t0 + LEAD_MS, end_ms, kinds=("cron",))
                await self.workload.create(client, base)
                nemeses = asyncio.create_task(self._nemeses(end_ms))
                try:
                    await self._load(client, end_ms)
                finally:
                    await nemeses
            _log(f"load done; settling ({len(self.windows)} nemeses ran)")
            return await settle(
                self.cluster, self.workload, self.sink, end_ms, self.windows, timeout_s=120
            )
        finally:
            await self.cluster.stop()
            await self.sink.stop()

    async def _load(self, client: ClockworkClient, end_ms: int) -> None:
        """One-shots every TICK_S, due LEAD_MS to LEAD_MS + TICK_S ahead."""
        assert self.workload is not None
        per_tick = self.args.rate * (1 - RECURRING_SHARE) * TICK_S
        carry = 0.0
        next_tick = time.monotonic()
        while True:
            start = now_ms() + LEAD_MS
            if start >= end_ms:
                return
            carry += per_tick
            count, carry = int(carry), carry - int(carry)
            stop = min(end_ms, start + int(TICK_S * 1000))
            await self.workload.create(
                client, self.workload.generate(count, start, stop, ("once",))
            )
            next_tick += TICK_S
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))

    async def _nemeses(self, end_ms: int) -> None:
        every = self.args.nemesis_every
        for n, name in enumerate(itertools.cycle(NEMESES)):
            await asyncio.sleep(every)
            # Leave time for the last fault to heal before the end.
            if now_ms() + 15_000 > end_ms:
                return
            _log(f"nemesis {n + 1}: {name}")
            self.windows.append(await self._inflict(name, n))

    async def _inflict(self, name: str, n: int) -> Window:
        cluster = self.cluster
        live = [i for i, w in enumerate(cluster.workers) if w in cluster.live_workers()]
        victim = live[n % len(live)]
        if name == "kill -9 worker":
            return await cluster.kill_worker(victim, respawn=True)
        if name == "SIGSTOP worker":
            return await cluster.pause_worker(victim, cluster.lease_ttl + 2)
        start = now_ms()
        await asyncio.to_thread(self.etcd.kill)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(self.etcd.restart)
        await cluster.wait_all_owned(len(cluster.live_workers()), 60)
        return Window("kill -9 etcd + restart", start, now_ms())


def _log(message: str) -> None:
    print(f"soak: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not os.environ.get("CLOCKWORK_CASSANDRA"):
        _log("CLOCKWORK_CASSANDRA is not set: python -m e2e.infra up cassandra etcd")
        return 2
    with tempfile.TemporaryDirectory(prefix="clockwork-soak-") as tmp:
        run_dir = args.run_dir or Path(tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        etcd = etcd_server.start(Path(tmp) / "infra")
        try:
            _log(
                f"{args.minutes} min at {args.rate}/s, seed {args.seed}, "
                f"{args.workers} workers, logs in {run_dir}"
            )
            report = asyncio.run(Soak(args, run_dir, etcd).run())
        finally:
            etcd.destroy()
    print(report.table())
    print(report.to_json())
    if args.json_out:
        args.json_out.write_text(report.to_json())
    ok = not report.lost and not report.unexpected
    _log("OK" if ok else f"FAILED: lost {len(report.lost)}, unexpected {len(report.unexpected)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
