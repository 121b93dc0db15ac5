"""Hand-over benchmark: how long a worker's shards go without a dispatching owner when
it leaves (SIGTERM: a scale-down, a rolling update), crashes (SIGKILL), or joins.

Usage: python -m bench.handover [--shards 256] [--workers 2] [--rounds 5] [--out DIR]

Each round runs on a fresh cluster (its own keyspace and etcd prefix, the workers'
default lease TTL) whose `--workers` worker processes own every shard:

- **leave**: SIGTERM one worker, until the others own every one of its shards (its
  SIGTERM path releases each after that shard's in-flight deliveries);
- **join**: start a worker, until it owns its fair share (the process's start included);
- **crash**: SIGKILL one worker, until the others own every one of its shards (its
  lease has to expire first).

Prints the median, minimum and maximum of each over the rounds and writes
handover.json. Nothing is due meanwhile: this is the coordination's own cost, the floor
under any firing's lag during such an event.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from bench.cluster import BenchCluster
from bench.common import machine, print_table, write_json
from clockwork_svc.settings import EtcdSettings
from tests.support.processes import ClockworkProcess

POLL_S = 0.02
TIMEOUT_S = 90.0


async def _until(check: Any, what: str) -> float:
    """Seconds until the coroutine function ``check`` returns true."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > TIMEOUT_S:
            raise TimeoutError(f"{what}: not within {TIMEOUT_S}s")
        await asyncio.sleep(POLL_S)
    return time.monotonic() - started


def _owner_of(process: ClockworkProcess) -> str:
    """The part of a worker id that names this process (ids are host-pid-random)."""
    assert process.proc is not None
    return f"-{process.proc.pid}-"


async def _taken_from(cluster: BenchCluster, gone: str) -> bool:
    count, owners, _ = await cluster.owners()
    return len(owners) == count and not any(gone in owner for owner, _ in owners.values())


async def _fair_share(cluster: BenchCluster, newcomer: str, workers: int) -> bool:
    count, owners, _ = await cluster.owners()
    mine = sum(1 for owner, _ in owners.values() if newcomer in owner)
    return len(owners) == count and mine >= count // workers


async def one_round(run_dir: Path, shards: int, workers: int) -> dict[str, float]:
    cluster = BenchCluster(run_dir, shards=shards)
    try:
        await cluster.start(workers)
        leaver = cluster.workers[0]
        gone = _owner_of(leaver)
        stopping = asyncio.create_task(leaver.kill(signal.SIGTERM))
        leave = await _until(lambda: _taken_from(cluster, gone), "leave")
        await stopping
        joiner = await cluster.add_worker()
        join = await _until(lambda: _fair_share(cluster, _owner_of(joiner), workers), "join")
        victim = cluster.workers[1]
        gone = _owner_of(victim)
        await victim.kill(signal.SIGKILL)
        crash = await _until(lambda: _taken_from(cluster, gone), "crash")
        return {"leave_s": leave, "join_s": join, "crash_s": crash}
    finally:
        await cluster.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-handover-") as tmp:
        for n in range(args.rounds):
            run_dir = Path(tmp) / f"round{n}"
            run_dir.mkdir()
            figures = await one_round(run_dir, args.shards, args.workers)
            print(", ".join(f"{k} {v:.2f}" for k, v in figures.items()), flush=True)
            rounds.append(figures)
    summary = {
        event: {
            "median_s": round(statistics.median(r[event] for r in rounds), 3),
            "min_s": round(min(r[event] for r in rounds), 3),
            "max_s": round(max(r[event] for r in rounds), 3),
        }
        for event in ("leave_s", "join_s", "crash_s")
    }
    return {
        "benchmark": "handover",
        "machine": machine(),
        "shards": args.shards,
        "workers": args.workers,
        "lease_ttl_s": EtcdSettings().lease_ttl_s,
        "rounds": rounds,
        "summary": summary,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.handover", description=__doc__)
    parser.add_argument("--shards", type=int, default=256, help="default: %(default)s")
    parser.add_argument("--workers", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--rounds", type=int, default=5, help="default: %(default)s")
    parser.add_argument("--out", type=Path, help="directory for handover.json")
    args = parser.parse_args()
    if args.workers < 2:
        parser.error("--workers must be at least 2 (one leaves, the others take over)")
    report = uvloop.run(run(args))
    rows = [{"event": event, **figures} for event, figures in report["summary"].items()]
    print_table(f"shard hand-over, {args.shards} shards, {args.workers} workers", rows)
    print(f"wrote {write_json('handover', report, args.out)}")


if __name__ == "__main__":
    main()
