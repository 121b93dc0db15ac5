"""The durable limits: the sink (HTTP, or a Kafka topic) driven by a plain load
generator that also does, per firing, the store work of a durable scheduler, through
Clockwork's own Cassandra store (opened as a worker opens it) and with no scheduler in
between.

Two levels, each measured over the same number of firings as the raw limit:

- `minimal`: what any at-least-once scheduler keeping its firings in Cassandra must do
  per firing at the least: read it from its time-bucketed partition (a paged scan of
  each shard, each row read once), deliver it (POST, or produce), then mark it done.
  No schedule, no execution record, no retry or cancel check.
- `clockwork-store`: the store work Clockwork's worker does for a one-shot firing:
  the same scan, the schedule read before the POST, then the execution record, the
  schedule's progress and completion, and `done`. What is left between this level and
  Clockwork's own rate is the scheduler itself (the worker's sweeps, timers, planning,
  the HTTP sink's headers and classification) and the store work done more than once
  per firing (a sweep reads a row again until it is done).

The firing rows are written before the clock starts (as the fire benchmark's creates
are), into shards above the layout's shard count, which no worker owns: the running
cluster never sees them. The schedules read at the `clockwork-store` level are real
ones, created by an earlier phase of the same run (`schedule_keys`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bench import kafka_io, loadgen
from bench.common import now_ms
from bench.resources import ResourceMonitor, cpu_per_100k
from clockwork_svc import app
from clockwork_svc.abc import Store, SystemClock
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import (
    DeliveryResult,
    Firing,
    FiringRecord,
    Outcome,
    Progress,
    Schedule,
)
from clockwork_svc.domain.spec import HttpTarget, Target
from clockwork_svc.settings import CassandraSettings, ProcessSettings, StoreSettings
from e2e.stores import CassandraAccess

LEVELS = ("minimal", "clockwork-store")
_SCAN_PAGE = 500
_ANSWERED_200 = DeliveryResult(ok=True, retryable=False, status_code=200)


async def open_store(access: CassandraAccess, keyspace: str) -> Store:
    """The store as a worker opens it (`clockwork_svc.app.open_store`): the same write
    batch, lingers and speculative delay, through the access's TLS and login."""
    cassandra = CassandraSettings(
        contact_points=access.contact_points,
        keyspace=keyspace,
        username=access.username,
        password=access.password,
        tls=access.tls,
    )
    settings = ProcessSettings(store=StoreSettings(kind="cassandra", cassandra=cassandra))
    return await app.open_store(settings, SystemClock(), serves_api=False)


def firings(
    tenant: str, schedule_keys: Sequence[str], first_shard: int, shards: int, label: str
) -> list[Firing]:
    """One due firing per schedule key, spread over `shards` shards from `first_shard`
    and over the last second (every one is due when the clock starts)."""
    due0 = now_ms() - 2_000
    n = len(schedule_keys)
    return [
        Firing(
            shard=first_shard + i % shards,
            fire_at_ms=due0 + (i * 1000) // n,
            firing_id=f"{label}{i:012x}",
            tenant=tenant,
            schedule_key=key,
            schedule_id=f"{label}-schedule-{i}",
            version=1,
            seq=0,
            occurrence_ms=due0,
            attempt=1,
            delivery_id=f"msg_{label}{i:012x}",
        )
        for i, key in enumerate(schedule_keys)
    ]


Send = Callable[[Firing, int], Awaitable[None]]
"""Delivers one firing, given the send time (s); raises unless the target took it."""


@asynccontextmanager
async def sender(
    target: Target, brokers: str | None, payload: bytes, concurrency: int
) -> AsyncIterator[Send]:
    """How the load generator delivers to `target`: aiohttp POSTs, or a producer
    configured as a worker's, to `brokers`."""
    if isinstance(target, HttpTarget):
        async with loadgen.session(concurrency) as http:

            async def post(f: Firing, timestamp_s: int) -> None:
                await loadgen.post(http, target.url, payload, f.delivery_id, timestamp_s)

            yield post
        return
    if brokers is None:
        raise ValueError("a Kafka target needs the brokers")
    async with kafka_io.producer(brokers) as made:

        async def produce(f: Firing, timestamp_s: int) -> None:
            await kafka_io.send(
                made, target.topic, payload, f.delivery_id, timestamp_s, f.schedule_key
            )

        yield produce


async def read_schedule(store: Store, f: Firing) -> Schedule:
    """The schedule of a one-shot firing, as the worker reads it before sending."""
    schedule = await store.get_schedule(f.tenant, f.schedule_key)
    if schedule is None:
        raise LookupError(f"schedule {f.tenant}/{f.schedule_key} not found")
    return schedule


async def record_answered(
    store: Store, f: Firing, schedule: Schedule, started_ms: int, finished_ms: int
) -> None:
    """The worker's record of a one-shot's delivery answered 200 (`done` aside)."""
    settled = planning.settle(schedule, f, _ANSWERED_200, started_ms, finished_ms, 0.0)
    progress = Progress(None, f.occurrence_ms, Outcome.SUCCEEDED, 1)
    record = FiringRecord(settled.execution, progress, schedule.version, finished_ms)
    await store.record_firing(record)


class _Driver:
    """Scans every shard and delivers each firing it finds, `concurrency` at once."""

    def __init__(
        self, store: Store, send: Send, clockwork_store_work: bool, concurrency: int
    ) -> None:
        self._store = store
        self._send = send
        self._clockwork_store_work = clockwork_store_work
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self.delivered = 0
        self.errors: list[str] = []

    async def run(self, shards: Sequence[int], start_ms: int, end_ms: int) -> None:
        await asyncio.gather(*(self._scan(shard, start_ms, end_ms) for shard in shards))
        while self._running:
            await asyncio.gather(*self._running)

    async def _scan(self, shard: int, start_ms: int, end_ms: int) -> None:
        position: tuple[int, str] = (start_ms, "")
        while True:
            page = await self._store.scan_firings(shard, position, end_ms, _SCAN_PAGE)
            if not page:
                return
            for firing in page:
                await self._slots.acquire()
                task = asyncio.create_task(self._fire(firing))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            position = (page[-1].fire_at_ms, page[-1].firing_id)

    async def _fire(self, f: Firing) -> None:
        try:
            schedule = None
            if self._clockwork_store_work:
                schedule = await read_schedule(self._store, f)
            started = now_ms()
            await self._send(f, started // 1000)
            finished = now_ms()
            if schedule is not None:
                await record_answered(self._store, f, schedule, started, finished)
            await self._store.mark_done(f)
            self.delivered += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
            self.errors.append(f"{f.firing_id}: {exc!r}")
        finally:
            self._slots.release()


async def limit(
    level_name: str,
    cassandra: CassandraAccess,
    keyspace: str,
    shard_count: int,
    tenant: str,
    schedule_keys: Sequence[str],
    target: Target,
    brokers: str | None,
    payload: bytes,
    concurrency: int,
    pids: dict[str, int],
) -> dict[str, Any]:
    """Write one due firing per key (untimed), then scan, deliver and record them all;
    the row reports firings/s and the CPU of the driver (this process) and of `pids`
    per 100k firings."""
    if level_name not in LEVELS:
        raise ValueError(f"level: {level_name!r} is not one of {LEVELS}")
    store = await open_store(cassandra, keyspace)
    try:
        # Shards no worker owns: above the layout's (each level its own range).
        first_shard = shard_count * (2 + LEVELS.index(level_name))
        due = firings(tenant, schedule_keys, first_shard, shard_count, f"d{level_name[0]}")
        await store.put_firings(due)
        start_ms = min(f.fire_at_ms for f in due) - 1
        end_ms = now_ms() + 1
        async with sender(target, brokers, payload, concurrency) as send:
            full = level_name == "clockwork-store"
            driver = _Driver(store, send, full, concurrency)
            monitor = ResourceMonitor({"driver": os.getpid(), **pids}).start()
            started = time.perf_counter()
            await driver.run(range(first_shard, first_shard + shard_count), start_ms, end_ms)
            seconds = time.perf_counter() - started
            usage = await monitor.stop()
    finally:
        await store.close()
    row: dict[str, Any] = {
        "run": f"raw + store: {level_name}, c={concurrency}",
        "level": level_name,
        "n": len(due),
        "deliveries_per_s": round(driver.delivered / seconds, 1),
        "errors": len(driver.errors),
    }
    row |= cpu_per_100k(usage, driver.delivered)
    if driver.errors:
        row["first_error"] = driver.errors[0]
    return row
