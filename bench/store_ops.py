"""Store-operations benchmark: what each store operation of the firing path costs,
with no delivery and no scheduler around it.

Usage: python -m bench.store_ops [--n 20000] [--reps 2] [--concurrency 512]

The store is opened as a worker opens it (`bench.raw_durable.open_store`: the same
write batch, read batching and lingers) on a keyspace of its own, against the
harness's Cassandra (`CLOCKWORK_CASSANDRA`). `--n` one-shot schedules are created,
and for each loop below, one due firing per schedule is written into shards of its
own; the loop then scans those shards and does, per firing, with `--concurrency`
firings at once:

- `minimal`: mark it done (a scan and `done`: what any scheduler keeping its firings
  in Cassandra does);
- `record`: write its record (`Store.record_firing`: execution, progress and
  completion in one group), then mark it done: Clockwork's store work without the
  schedule read;
- `read + record`: read its schedule first: Clockwork's store work for a one-shot.

Then the same firings are scanned again as full rows and as keys only
(`Store.scan_firing_keys`, the sweep's read). Each loop reports its rate and the CPU
per firing (or per row) of Cassandra and of this process, the client. `--reps`
repeats every loop on new firings; the spread between repetitions is the noise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import uvloop

from bench.common import machine, print_table, write_json
from bench.raw_durable import open_store, read_schedule, record_answered
from bench.resources import ResourceMonitor, listening
from clockwork_svc.abc import Store
from clockwork_svc.domain import identity, triggers
from clockwork_svc.domain.model import (
    ClusterLayout,
    Firing,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.storage.cassandra import schema
from e2e.stores import CassandraAccess

LOOPS = ("minimal", "record", "read + record")
_LAYOUT_SHARDS = 64
_SHARDS_PER_LOOP = 8
_PAGE = 500
_TENANT = "bench"

FiringWork = Callable[[Store, Firing], Awaitable[None]]


def _schedules(n: int, now: int) -> list[Schedule]:
    spec = ScheduleSpec(
        trigger=triggers.OnceTrigger(now),
        target=HttpTarget("http://127.0.0.1:9/hook"),
        payload=b'{"bench": true}',
    )
    return [
        Schedule(
            tenant=_TENANT,
            key=f"k{i:08d}",
            id=uuid.uuid4().hex,
            spec=spec,
            state=ScheduleState.ACTIVE,
            version=1,
            created_ms=now,
            updated_ms=now,
            shard=i % _LAYOUT_SHARDS,
            next_fire_ms=now,
        )
        for i in range(n)
    ]


def _firings(schedules: Sequence[Schedule], first_shard: int, due0: int) -> list[Firing]:
    n = len(schedules)
    return [
        Firing(
            shard=first_shard + i % _SHARDS_PER_LOOP,
            fire_at_ms=due0 + (i * 1000) // n,
            firing_id=identity.firing_id(s.id, 0, due0, 1),
            tenant=s.tenant,
            schedule_key=s.key,
            schedule_id=s.id,
            version=s.version,
            seq=0,
            occurrence_ms=due0,
            attempt=1,
            delivery_id=f"msg_{s.id}",
        )
        for i, s in enumerate(schedules)
    ]


async def _mark_done(store: Store, f: Firing) -> None:
    await store.mark_done(f)


def _record(read: bool, schedules: dict[str, Schedule]) -> FiringWork:
    async def work(store: Store, f: Firing) -> None:
        schedule = await read_schedule(store, f) if read else schedules[f.schedule_key]
        now = time.time_ns() // 1_000_000
        await record_answered(store, f, schedule, now, now + 1)
        await store.mark_done(f)

    return work


async def _scan_all(
    shards: range, start_ms: int, end_ms: int, page: Callable[[int, tuple[int, str]], Any]
) -> int:
    """Every row of `shards` in [start, end); returns how many."""

    async def one(shard: int) -> int:
        count, position = 0, (start_ms, "")
        while rows := await page(shard, position):
            count += len(rows)
            position = rows[-1].sort_key
        return count

    return sum(await asyncio.gather(*(one(s) for s in shards)))


def _row(name: str, n: int, seconds: float, usage: dict[str, Any], unit: str) -> dict[str, Any]:
    row: dict[str, Any] = {"loop": name, "n": n, "per_s": round(n / seconds, 1)}
    for process, used in usage.items():
        row[f"{process}_us_per_{unit}"] = round(used.cpu_s / max(1, n) * 1e6, 1)
    return row


async def _loop(
    store: Store,
    name: str,
    work: FiringWork,
    firings: Sequence[Firing],
    concurrency: int,
    pids: dict[str, int],
) -> dict[str, Any]:
    shards = range(firings[0].shard, firings[0].shard + _SHARDS_PER_LOOP)
    start = min(f.fire_at_ms for f in firings)
    end = max(f.fire_at_ms for f in firings) + 1
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task[None]] = set()
    errors: list[BaseException] = []

    async def fire(f: Firing) -> None:
        try:
            await work(store, f)
        except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
            errors.append(exc)
        finally:
            slots.release()

    async def page(shard: int, position: tuple[int, str]) -> list[Firing]:
        rows = await store.scan_firings(shard, position, end, _PAGE)
        for f in rows:
            await slots.acquire()
            task = asyncio.create_task(fire(f))
            running.add(task)
            task.add_done_callback(running.discard)
        return rows

    monitor = ResourceMonitor(pids).start()
    started = time.perf_counter()
    done = await _scan_all(shards, start, end, page)
    while running:
        await asyncio.gather(*running)
    seconds = time.perf_counter() - started
    row = _row(name, done, seconds, await monitor.stop(), "firing")
    row["errors"] = len(errors)
    if errors:
        row["first_error"] = repr(errors[0])
    return row


async def _scans(
    store: Store, firings: Sequence[Firing], pids: dict[str, int]
) -> list[dict[str, Any]]:
    shards = range(firings[0].shard, firings[0].shard + _SHARDS_PER_LOOP)
    start = min(f.fire_at_ms for f in firings)
    end = max(f.fire_at_ms for f in firings) + 1
    readers: dict[str, Callable[[int, tuple[int, str]], Any]] = {
        "scan, full rows": lambda shard, pos: store.scan_firings(shard, pos, end, _PAGE),
        "scan, keys only": lambda shard, pos: store.scan_firing_keys(shard, pos, end, _PAGE),
    }
    rows = []
    for name, reader in readers.items():
        monitor = ResourceMonitor(pids).start()
        started = time.perf_counter()
        count = await _scan_all(shards, start, end, reader)
        seconds = time.perf_counter() - started
        rows.append(_row(name, count, seconds, await monitor.stop(), "row"))
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    access = CassandraAccess.from_env("CLOCKWORK_CASSANDRA")
    if not access.contact_points:
        raise SystemExit("CLOCKWORK_CASSANDRA is not set: python -m e2e.infra up cassandra")
    contact_point = access.contact_points[0]
    keyspace = "bench_ops_" + uuid.uuid4().hex[:8]
    now = time.time_ns() // 1_000_000
    await schema.migrate(
        [contact_point],
        keyspace,
        replication={"class": "SimpleStrategy", "replication_factor": 1},
        layout=ClusterLayout(_LAYOUT_SHARDS, 60_000, now),
        **access.connect_kwargs(),
    )
    store = await open_store(access, keyspace)
    pids = {**listening({"cassandra": contact_point}), "client": os.getpid()}
    rows: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            for index, name in enumerate(LOOPS):
                # New schedules per loop: every schedule row is read once, as a
                # one-shot's is.
                schedules = _schedules(args.n, now)
                for i in range(0, len(schedules), _PAGE):
                    await store.insert_schedules(schedules[i : i + _PAGE])
                first_shard = _LAYOUT_SHARDS + (rep * len(LOOPS) + index) * _SHARDS_PER_LOOP
                firings = _firings(schedules, first_shard, time.time_ns() // 1_000_000 - 2_000)
                for i in range(0, len(firings), _PAGE):
                    await store.put_firings(firings[i : i + _PAGE])
                by_key = {s.key: s for s in schedules}
                work = _mark_done if name == "minimal" else _record(name != "record", by_key)
                row = await _loop(store, name, work, firings, args.concurrency, pids)
                rows.append({"rep": rep + 1, **row})
                if name == "minimal":
                    rows += [{"rep": rep + 1, **r} for r in await _scans(store, firings, pids)]
    finally:
        await store.close()
        await schema.drop_keyspace_for_tests([contact_point], keyspace, **access.connect_kwargs())
    return {"machine": machine(), "n": args.n, "concurrency": args.concurrency, "loops": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="firings per loop")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of every loop")
    parser.add_argument("--concurrency", type=int, default=512)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    if args.n < 1 or args.reps < 1 or args.concurrency < 1:
        parser.error("--n, --reps and --concurrency must be at least 1")
    report = uvloop.run(run(args))
    print_table("store operations per firing (no delivery)", report["loops"])
    print(f"json: {write_json('store_ops', report, args.out)}")


if __name__ == "__main__":
    main()
