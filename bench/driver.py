"""Driver benchmark: what one Cassandra request costs the client, with the driver's
sockets served by the event loop (`LoopConnection`, what Clockwork runs) and by the
driver's own libev reactor (a thread of its own), in the same run.

Usage: python -m bench.driver [--seconds 5] [--reps 3] [--in-flight 64]
                              [--paced-rate 80] [--out DIR]

Each request is a prepared single-row read of `system.local` through Clockwork's
bridge (`bridge.execute`), so the server's share is small and the same for both. Per
reactor, three phases of `--seconds` each: one request at a time (`sequential`), a
fixed `--paced-rate` of requests one at a time (`paced`: a light load, where nothing
amortises a request's wake-ups), and `--in-flight` requests at once (`in flight`).
Each phase reports requests/s and this process's CPU per request (all its threads).
`--reps` repeats both reactors, alternating which goes first; the ratios loop / libev
of each repetition and their spread are the result. Against the harness's Cassandra
(`CLOCKWORK_CASSANDRA`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop
from cassandra.io.libevreactor import LibevConnection

from bench.common import machine, print_table, ratio, write_json
from clockwork_svc.storage.cassandra import bridge, connecting
from e2e.stores import CassandraAccess

READ = "SELECT key, cluster_name FROM system.local WHERE key = ?"
REACTORS = ("loop", "libev")
PHASES = ("sequential", "paced", "in flight")
_WARM_UP_REQUESTS = 300


async def _timed(seconds: float, body: Callable[[float], Awaitable[int]]) -> dict[str, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    requests = await body(started + seconds)
    elapsed = time.perf_counter() - started
    return {
        "requests": requests,
        "requests_per_s": round(requests / elapsed, 1),
        "cpu_us_per_request": round((time.process_time() - cpu) / requests * 1e6, 1),
    }


async def _phases(session: Any, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    statement = await asyncio.to_thread(session.prepare, READ)

    async def read() -> None:
        page = await bridge.execute(session, statement, ("local",))
        if [row["key"] for row in page.rows] != ["local"]:
            raise RuntimeError(f"system.local answered {page.rows!r}")

    async def sequential(until: float) -> int:
        done = 0
        while time.perf_counter() < until:
            await read()
            done += 1
        return done

    async def paced(until: float) -> int:
        start, done = time.perf_counter(), 0
        while time.perf_counter() < until:
            await read()
            done += 1
            await asyncio.sleep(max(0.0, start + done / args.paced_rate - time.perf_counter()))
        return done

    async def in_flight(until: float) -> int:
        async def lane() -> int:
            return await sequential(until)

        return sum(await asyncio.gather(*(lane() for _ in range(args.in_flight))))

    for _ in range(_WARM_UP_REQUESTS):
        await read()
    bodies = {"sequential": sequential, "paced": paced, "in flight": in_flight}
    return {name: await _timed(args.seconds, bodies[name]) for name in PHASES}


async def _reactor(
    access: CassandraAccess, reactor: str, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    cluster, session = await connecting.connect(
        list(access.contact_points),
        connection_class=LibevConnection if reactor == "libev" else None,
        **access.connect_kwargs(),
    )
    try:
        return await _phases(session, args)
    finally:
        await connecting.shutdown(cluster)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    access = CassandraAccess.from_env("CLOCKWORK_CASSANDRA")
    if not access.contact_points:
        raise SystemExit("CLOCKWORK_CASSANDRA is not set: python -m e2e.infra up cassandra")
    rows: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    for rep in range(1, args.reps + 1):
        order = REACTORS if rep % 2 else REACTORS[::-1]
        found = {reactor: await _reactor(access, reactor, args) for reactor in order}
        for reactor in REACTORS:
            rows += [
                {"rep": rep, "reactor": reactor, "phase": p, **found[reactor][p]} for p in PHASES
            ]
        for phase in PHASES:
            loop, libev = found["loop"][phase], found["libev"][phase]
            ratios.append(
                {
                    "rep": rep,
                    "phase": phase,
                    "requests_per_s loop / libev": ratio(
                        loop["requests_per_s"], libev["requests_per_s"]
                    ),
                    "cpu per request loop / libev": ratio(
                        loop["cpu_us_per_request"], libev["cpu_us_per_request"]
                    ),
                }
            )
    return {
        "machine": machine(),
        "seconds": args.seconds,
        "paced_rate": args.paced_rate,
        "in_flight": args.in_flight,
        "runs": rows,
        "ratios": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of both reactors")
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--paced-rate", type=float, default=80.0, help="requests/s when paced")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    if args.seconds <= 0 or args.reps < 1 or args.in_flight < 1 or args.paced_rate <= 0:
        parser.error("--seconds, --reps, --in-flight and --paced-rate must be positive")
    report = uvloop.run(run(args))
    print_table("driver: one request, per reactor", report["runs"])
    print_table("driver: loop against libev, per repetition", report["ratios"])
    print(f"json: {write_json('driver', report, args.out)}")


if __name__ == "__main__":
    main()
