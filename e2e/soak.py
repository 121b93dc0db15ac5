"""Soak: a steady load on a real cluster with periodic nemeses, judged by the checker.

    python -m e2e.soak --minutes 60 --rate 50 --seed 7

needs CLOCKWORK_CASSANDRA (``set -a; . .infra/env; set +a`` after ``python -m e2e.infra
up cassandra etcd``). It starts its own etcd member in a temporary state dir (the
nemeses restart it), an in-process recording sink, one api and ``--workers`` workers
on a fresh keyspace, then for ``--minutes``:

* keeps about ``--rate`` firings per second due: a quarter from interval and cron
  schedules created up front (running until the end), the rest one-shots created every
  two seconds, due three to five seconds later;
* every ``--nemesis-every`` seconds runs the next nemesis in turn (``--nemeses``
  picks some): kill -9 a worker (and start a replacement); a burst of
  ``--burst-factor`` x the api's in-flight limit (``--api-max-in-flight``) one-shot
  creates sent at once without retries; SIGSTOP a worker past its lease then resume
  it; Cassandra at a tenth of its speed for ``--slow-store-s`` (SIGSTOP/SIGCONT of
  the node at CLOCKWORK_CASSANDRA, which must run on this machine); kill -9 etcd and
  restart it;
* samples the RSS of the api, each worker, Cassandra, etcd and the soak process
  itself (sink and checker) every ``--memory-every`` seconds.

At the end it waits for the stragglers and prints the checker's report (a table,
then JSON with the bursts' figures and the memory summary; also written to
``--json-out``; ``--plot`` draws the memory over time with the fault windows). A
burst's created keys join the expected firings; every refused key is checked absent.
Exit status 1 if anything was lost or delivered unexpectedly, a burst got any answer
but OK or a hinted UNAVAILABLE, or a refused create exists. The long mode is the same
command with hours of ``--minutes`` (not run in CI; the sink keeps every request in
memory, about 2 KiB each). CI runs a short mode (tests/nemesis/test_soak.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.resources import RssTimeline, listener_pid
from clockwork_svc.client import ClockworkClient
from clockwork_svc.errors import NotFound
from e2e.checker import Report, Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.infra import Running
from e2e.infra import etcd as etcd_server
from e2e.overload import BurstOutcome, create_burst, throttle
from e2e.sink import RecordingSink
from e2e.workload import Workload

TICK_S = 2.0
LEAD_MS = 3_000
RECURRING_SHARE = 0.25
MEAN_INTERVAL_RATE = (1 / 2 + 1 / 3 + 1 / 5) / 3  # firings per second of one interval schedule
NEMESES = ("kill -9 worker", "create burst", "SIGSTOP worker", "slow Cassandra", "restart etcd")


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
    parser.add_argument(
        "--nemeses",
        default=",".join(NEMESES),
        help=f"comma-separated, run in this order (default: {','.join(NEMESES)})",
    )
    parser.add_argument("--api-max-in-flight", type=int, default=32)
    parser.add_argument("--burst-factor", type=int, default=10)
    parser.add_argument("--slow-store-s", type=float, default=10.0)
    parser.add_argument("--memory-every", type=float, default=5.0, help="seconds")
    parser.add_argument("--plot", type=Path, help="write the memory-over-time PNG here")
    parser.add_argument("--run-dir", type=Path, help="logs (default: a temporary directory)")
    parser.add_argument("--json-out", type=Path, help="also write the JSON report here")
    return parser


class Soak:
    def __init__(
        self,
        args: argparse.Namespace,
        run_dir: Path,
        etcd: Running,
        nemeses: Sequence[str],
        cassandra_pid: int | None,
    ) -> None:
        self.args = args
        self.run_dir = run_dir
        self.etcd = etcd
        self.nemeses = list(nemeses)
        self.cassandra_pid = cassandra_pid
        self.sink = RecordingSink()
        self.cluster = Cluster(
            run_dir,
            os.environ["CLOCKWORK_CASSANDRA"],
            etcd.address,
            shards=args.shards,
            lease_ttl=args.lease_ttl,
            log_level="WARNING",
        )
        self.cluster.env["CLOCKWORK_MAX_IN_FLIGHT"] = str(args.api_max_in_flight)
        self.workload: Workload | None = None
        self.windows: list[Window] = []
        self.kinds: list[str] = []
        """The nemesis of each window."""
        self.bursts: list[dict[str, object]] = []
        self.faults: list[str] = []
        """Overload answers that break the contract (unclean, or refused yet created)."""
        self.memory = RssTimeline(self._pids, args.memory_every)
        self.memory_t0_ms = 0

    def _pids(self) -> dict[str, int]:
        pids = self.cluster.pids()  # a killed worker's pid is skipped: no such process
        pids["etcd"] = self.etcd.pid
        if self.cassandra_pid is not None:
            pids["cassandra"] = self.cassandra_pid
        pids["soak (sink, checker)"] = os.getpid()
        return pids

    async def run(self) -> Report:
        args = self.args
        await self.sink.start()
        try:
            await self.cluster.start(args.workers)
            self.memory_t0_ms = now_ms()
            self.memory.start()
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
            await self.memory.stop()
            try:
                await self.cluster.stop()
            finally:
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
        for n, name in enumerate(itertools.cycle(self.nemeses)):
            await asyncio.sleep(every)
            # Leave time for the last fault to heal before the end.
            if now_ms() + 15_000 > end_ms:
                return
            _log(f"nemesis {n + 1}: {name}")
            self.windows.append(await self._inflict(name, n))
            self.kinds.append(name)

    async def _inflict(self, name: str, n: int) -> Window:
        cluster = self.cluster
        live = [i for i, w in enumerate(cluster.workers) if w in cluster.live_workers()]
        victim = live[n % len(live)]
        if name == "kill -9 worker":
            return await cluster.kill_worker(victim, respawn=True)
        if name == "SIGSTOP worker":
            return await cluster.pause_worker(victim, cluster.lease_ttl + 2)
        if name == "create burst":
            return await self._burst()
        start = now_ms()
        if name == "slow Cassandra":
            assert self.cassandra_pid is not None
            await throttle(self.cassandra_pid, self.args.slow_store_s)
            return Window(f"Cassandra 10% {self.args.slow_store_s:.0f}s", start, now_ms())
        await asyncio.to_thread(self.etcd.kill)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(self.etcd.restart)
        await cluster.wait_all_owned(len(cluster.live_workers()), 60)
        return Window("kill -9 etcd + restart", start, now_ms())

    async def _burst(self) -> Window:
        """burst-factor x max-in-flight one-shots at once, due LEAD_MS ahead: the created
        ones join the workload, the refused ones must not exist, and any other answer is
        a fault (its schedule, if it was created after all, joins the workload too)."""
        assert self.workload is not None
        n = self.args.burst_factor * self.args.api_max_in_flight
        start = now_ms()
        planned = self.workload.generate(
            n, start + LEAD_MS, start + LEAD_MS + int(TICK_S * 1000), ("once",)
        )
        outcome: BurstOutcome = await create_burst(
            self.cluster.api_address, self.cluster.tenant, [(p.key, p.spec) for p in planned]
        )
        for key, (schedule_id, acked_ms) in outcome.created.items():
            self.workload.acknowledge(key, schedule_id, start, acked_ms)
        async with self.cluster.client(timeout_s=60) as client:
            for key in outcome.refused:
                try:
                    await client.get(key)
                except NotFound:
                    continue
                self.faults.append(f"{key}: refused with a hint, yet created")
            for key, code in outcome.unclean.items():
                self.faults.append(f"{key}: {code}")
                try:
                    found = await client.get(key)
                except NotFound:
                    continue
                self.workload.acknowledge(key, found.id, start, now_ms())
        figures = outcome.figures()
        self.bursts.append(figures)
        _log(f"burst: {figures}")
        return Window(f"burst {n} creates", start, now_ms())

    def plot(self, path: Path) -> Path:
        from bench.plot import memory_over_time  # matplotlib only when a plot is asked for

        t0 = self.memory_t0_ms
        windows = [
            (kind, (w.start_ms - t0) / 1000, (w.end_ms - t0) / 1000)
            for kind, w in zip(self.kinds, self.windows, strict=True)
        ]
        title = (
            f"Soak: RSS over {self.args.minutes:g} min at {self.args.rate:g} firings/s, "
            f"{self.args.workers} workers"
        )
        # The run and its settling: the samples taken while the checker judged show
        # only the checker's own memory.
        until_s = self.args.minutes * 60 + 180
        return memory_over_time(self.memory.series, windows, path, title, until_s)

    def to_json(self, report: Report) -> str:
        body = json.loads(report.to_json())
        body["bursts"] = self.bursts
        body["overload_faults"] = len(self.faults)
        body["overload_fault_examples"] = self.faults[:20]
        body["memory_mb"] = self.memory.summary()
        body["memory_t0_ms"] = self.memory_t0_ms
        body["window_kinds"] = self.kinds
        body["memory_series"] = self.memory.series
        return json.dumps(body, indent=1)


def _log(message: str) -> None:
    print(f"soak: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not os.environ.get("CLOCKWORK_CASSANDRA"):
        _log("CLOCKWORK_CASSANDRA is not set: python -m e2e.infra up cassandra etcd")
        return 2
    nemeses = [n.strip() for n in args.nemeses.split(",") if n.strip()]
    if unknown := sorted(set(nemeses) - set(NEMESES)):
        _log(f"--nemeses: unknown {unknown}; known: {', '.join(NEMESES)}")
        return 2
    cassandra_pid = listener_pid(os.environ["CLOCKWORK_CASSANDRA"].split(",")[0])
    if "slow Cassandra" in nemeses and cassandra_pid is None:
        _log("slow Cassandra: no local process listens at CLOCKWORK_CASSANDRA")
        return 2
    with tempfile.TemporaryDirectory(prefix="clockwork-soak-") as tmp:
        run_dir = args.run_dir or Path(tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        etcd = etcd_server.start(Path(tmp) / "infra")
        try:
            _log(
                f"{args.minutes} min at {args.rate}/s, seed {args.seed}, "
                f"{args.workers} workers, nemeses {', '.join(nemeses)}, logs in {run_dir}"
            )
            soak = Soak(args, run_dir, etcd, nemeses, cassandra_pid)
            report = asyncio.run(soak.run())
        finally:
            etcd.destroy()
    print(report.table())
    print(_overload_table(soak))
    body = soak.to_json(report)
    print(body)
    if args.json_out:
        args.json_out.write_text(body)
    if args.plot:
        _log(f"memory plot: {soak.plot(args.plot)}")
    ok = not report.lost and not report.unexpected and not soak.faults
    _log(
        "OK"
        if ok
        else f"FAILED: lost {len(report.lost)}, unexpected {len(report.unexpected)}, "
        f"overload faults {len(soak.faults)}"
    )
    return 0 if ok else 1


def _overload_table(soak: Soak) -> str:
    lines = [
        "",
        f"{'burst':<6}{'calls':>7}{'ok':>7}{'refused':>9}{'unclean':>9}{'hint p50/max ms':>18}",
    ]
    for i, b in enumerate(soak.bursts, 1):
        hints = f"{b['hint_p50_ms']}/{b['hint_max_ms']}"
        lines.append(
            f"{i:<6}{b['calls']:>7}{b['ok']:>7}{b['refused']:>9}{b['unclean']:>9}{hints:>18}"
        )
    lines += ["", f"{'process':<24}{'warm MiB':>10}{'peak MiB':>10}{'last MiB':>10}"]
    for name, m in soak.memory.summary().items():
        lines.append(f"{name:<24}{m['warm_mb']:>10}{m['peak_mb']:>10}{m['last_mb']:>10}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
