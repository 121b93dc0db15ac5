"""The sweep (worker/shard_scanner.py): a firing written after the forward scan passed
its due time is found and admitted once; the rows the scanner has already seen are
re-read as keys only, never in full again; an idle shard costs one keys read a poll."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import identity
from clockwork_svc.domain.model import ClusterLayout, Firing, FiringKey
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.shard_scanner import ScanSettings, ShardScanner

CLOCK = SystemClock()
SHARD = 0


class CountingStore(SqliteStore):
    """The SQLite store, counting its scans and how often each firing came back from a
    full one."""

    full_reads: Counter[str]
    scans: Counter[str]

    async def scan_firings(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        page = await super().scan_firings(shard, start, end_ms, limit)
        self.scans["full"] += 1
        self.full_reads.update(f.firing_id for f in page)
        return page

    async def scan_firing_keys(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[FiringKey]:
        self.scans["keys"] += 1
        return await super().scan_firing_keys(shard, start, end_ms, limit)


def firing(label: str, fire_at_ms: int) -> Firing:
    return Firing(
        shard=SHARD,
        fire_at_ms=fire_at_ms,
        firing_id=identity.firing_id(label, 0, fire_at_ms, 1),
        tenant="t",
        schedule_key=label,
        schedule_id=label,
        version=1,
        seq=0,
        occurrence_ms=fire_at_ms,
        attempt=1,
        delivery_id=f"msg_{label}",
    )


async def eventually(condition: object, timeout_s: float = 5.0) -> None:
    deadline = CLOCK.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert CLOCK.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


SETTINGS = ScanSettings(
    lookahead_ms=2_000, settle_ms=3_000, poll_interval_ms=50, sweep_interval_ms=50
)


# The cursor follows the scan closely: a finished firing is passed within ~0.2 s.
FAST_CURSOR = dataclasses.replace(SETTINGS, settle_ms=100, cursor_interval_ms=50)


async def counting_store(tmp_path: Path) -> CountingStore:
    store = await CountingStore.open(tmp_path / "db", ClusterLayout(1, 60_000, CLOCK.now_ms()))
    assert isinstance(store, CountingStore)
    store.full_reads, store.scans = Counter(), Counter()
    return store


@asynccontextmanager
async def running(scanner: ShardScanner, store: CountingStore) -> AsyncIterator[None]:
    """The scanner runs inside the block; then it stops and the store closes."""
    task = asyncio.create_task(scanner.run())
    try:
        yield
    finally:
        scanner.active = False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()


async def test_an_idle_shard_costs_one_keys_read_per_poll(tmp_path: Path) -> None:
    store = await counting_store(tmp_path)
    scanner = ShardScanner(SHARD, 1, store, CLOCK, SETTINGS, lambda f, _: None)
    async with running(scanner, store):
        await asyncio.sleep(0.5)
    assert store.scans["full"] == 0
    assert store.scans["keys"] >= 2


async def test_sweep_finds_a_late_write_and_rereads_seen_rows_as_keys_only(
    tmp_path: Path,
) -> None:
    store = await counting_store(tmp_path)
    admitted: list[str] = []
    scanner = ShardScanner(
        SHARD, 1, store, CLOCK, SETTINGS, lambda f, _: admitted.append(f.schedule_key)
    )
    now = CLOCK.now_ms()
    early, done = firing("early", now + 300), firing("done", now + 200)
    await store.put_firings([early, done])
    await store.mark_done(done)
    async with running(scanner, store):
        await eventually(lambda: "early" in admitted)
        # Due before the range the forward scan has passed, written only now.
        late = firing("late", now + 100)
        await store.put_firings([late])
        await eventually(lambda: "late" in admitted)
        scanner.finished(early)
        await asyncio.sleep(0.5)  # ten sweeps over both rows
    assert sorted(admitted) == ["early", "late"]  # each once; the done firing never
    assert store.full_reads[early.firing_id] == 1
    assert store.full_reads[late.firing_id] == 1


async def test_a_shard_at_its_pending_limit_reads_nothing(tmp_path: Path) -> None:
    store = await counting_store(tmp_path)
    admitted: list[str] = []
    settings = dataclasses.replace(SETTINGS, max_pending=2, page_size=1)
    scanner = ShardScanner(
        SHARD, 1, store, CLOCK, settings, lambda f, _: admitted.append(f.schedule_key)
    )
    now = CLOCK.now_ms()
    await store.put_firings([firing(f"f{i}", now + 500 + i) for i in range(5)])
    async with running(scanner, store):
        await eventually(lambda: len(admitted) == 2)
        await asyncio.sleep(0.1)
        scans = sum(store.scans.values())
        await asyncio.sleep(0.3)  # six polls
        assert sum(store.scans.values()) == scans
    assert admitted == ["f0", "f1"]


class StuckCursorStore(CountingStore):
    """Its cursor writes never answer (a coordinator its clients cannot reach), until
    `release` is set; then they report `fenced` or success."""

    release: asyncio.Event
    fenced: bool

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        await self.release.wait()
        return not self.fenced


async def test_a_cursor_write_held_up_does_not_hold_up_the_scan(tmp_path: Path) -> None:
    store = await StuckCursorStore.open(tmp_path / "db", ClusterLayout(1, 60_000, CLOCK.now_ms()))
    assert isinstance(store, StuckCursorStore)
    store.full_reads, store.scans = Counter(), Counter()
    store.release, store.fenced = asyncio.Event(), True
    admitted: list[str] = []
    settings = dataclasses.replace(SETTINGS, cursor_interval_ms=50)
    fenced: list[int] = []
    scanner = ShardScanner(
        SHARD,
        1,
        store,
        CLOCK,
        settings,
        lambda f, _: admitted.append(f.schedule_key),
        on_fenced=lambda: fenced.append(SHARD),
    )
    now = CLOCK.now_ms()
    async with running(scanner, store):
        await asyncio.sleep(0.3)  # a cursor write is in flight, and stuck
        await store.put_firings([firing("later", now + 600)])
        await eventually(lambda: "later" in admitted)
        assert fenced == []
        # When the write answers that a newer owner holds the shard, the scanner stops.
        store.release.set()
        await eventually(lambda: fenced == [SHARD])
    assert not scanner.active


def scanner_admitting(
    store: CountingStore, settings: ScanSettings = SETTINGS
) -> tuple[ShardScanner, list[int]]:
    """A scanner of `store`, and the due times of the rows it admits, in order."""
    admitted: list[int] = []
    scanner = ShardScanner(
        SHARD, 1, store, CLOCK, settings, lambda f, _: admitted.append(f.fire_at_ms)
    )
    return scanner, admitted


async def rows_done(store: CountingStore, of: Firing) -> dict[int, bool]:
    """The stored rows of a firing (every time it was written at): fire_at -> done."""
    keys = await store.scan_firing_keys(SHARD, (0, ""), of.fire_at_ms + 3_600_000, 1_000)
    return {k.fire_at_ms: k.done for k in keys if k.firing_id == of.firing_id}


async def test_a_finished_firing_written_again_later_is_not_admitted_again(
    tmp_path: Path,
) -> None:
    """A firing written too late is written again, due later, under the same id
    (planning.late_rewrites). Once the first row was read and finished, the second
    is not admitted, however often sweeps read it, also after the cursor has passed
    the first row; and it is marked done, so that a next owner starting from a cursor
    between the two rows does not deliver it again."""
    store = await counting_store(tmp_path)
    scanner, admitted = scanner_admitting(store, FAST_CURSOR)
    now = CLOCK.now_ms()
    first = firing("late", now + 100)
    again = dataclasses.replace(first, fire_at_ms=now + 400)
    await store.put_firings([first])
    async with running(scanner, store):
        await eventually(lambda: admitted == [now + 100])
        scanner.finished(first)
        await store.mark_done(first)
        await store.put_firings([again])
        await eventually(lambda: scanner._position > now + 100)
        await asyncio.sleep(0.6)  # sweeps over the second row after the first was passed
        await eventually(lambda: scanner._position > now + 400)
        assert await rows_done(store, first) == {now + 100: True, now + 400: True}
    assert admitted == [now + 100]


async def test_a_finished_firing_is_forgotten_once_the_cursor_passes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A firing written once: when it has finished and the cursor passes its row, the
    scanner forgets it, and the scan goes on without a fault."""
    store = await counting_store(tmp_path)
    scanner, admitted = scanner_admitting(store, FAST_CURSOR)
    now = CLOCK.now_ms()
    once = firing("once", now + 100)
    await store.put_firings([once])
    with caplog.at_level(logging.WARNING, logger="clockwork_svc.worker.shard_scanner"):
        async with running(scanner, store):
            await eventually(lambda: admitted == [now + 100])
            await store.mark_done(once)
            scanner.finished(once)
            assert scanner._finished[once.firing_id].latest_ms == now + 100
            await eventually(lambda: scanner._position > now + 100 and not scanner._finished)
            await asyncio.sleep(0.2)  # more cursor advances
    assert [r.getMessage() for r in caplog.records] == []
    assert admitted == [now + 100]


async def test_a_row_seen_while_its_firing_is_in_flight_is_marked_done_with_it(
    tmp_path: Path,
) -> None:
    """The second row of a firing written twice, read while the first is in flight:
    once the first finishes, the second is marked done, and the id stays known until
    the cursor passes the second row."""
    store = await counting_store(tmp_path)
    scanner = ShardScanner(SHARD, 1, store, CLOCK, SETTINGS, lambda f, _: None)
    first = firing("late", 1_000)
    again = dataclasses.replace(first, fire_at_ms=4_000)
    await store.put_firings([first, again])
    scanner._admit(first)
    scanner._admit(again)  # skipped: in flight
    await store.mark_done(first)  # the dispatcher's part
    scanner.finished(first)
    assert scanner._finished[first.firing_id].latest_ms == 4_000
    await eventually(lambda: not scanner._marking)
    assert await rows_done(store, first) == {1_000: True, 4_000: True}
    await store.close()


async def test_an_earlier_row_of_a_finished_firing_is_marked_done(tmp_path: Path) -> None:
    """The rows of a firing written twice can be read in either order (the earlier
    one may become readable only after a sweep passed it): whichever was dispatched,
    the other is marked done when read."""
    store = await counting_store(tmp_path)
    scanner, admitted = scanner_admitting(store)
    now = CLOCK.now_ms()
    later = firing("late", now + 300)
    earlier = dataclasses.replace(later, fire_at_ms=now + 100)
    await store.put_firings([later])
    async with running(scanner, store):
        await eventually(lambda: admitted == [now + 300])
        await store.mark_done(later)
        scanner.finished(later)
        await store.put_firings([earlier])  # inside the sweep's settle window
        await eventually(
            lambda: (
                not scanner._marking
                and earlier.fire_at_ms in (scanner._finished[later.firing_id].marked)
            )
        )
        assert await rows_done(store, later) == {now + 100: True, now + 300: True}
    assert admitted == [now + 300]
