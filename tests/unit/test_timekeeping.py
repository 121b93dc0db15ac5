"""Cluster time (clockwork_svc/timekeeping.py): anchored on a reference clock, carried
by the monotonic clock, immune to steps of the host's wall clock."""

from __future__ import annotations

import asyncio
import threading

import pytest

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.timekeeping import StoreClock, WriteTimestamps

MS = 1_000_000  # ns


class HostClocks:
    """A host's wall and monotonic clocks, moved by hand."""

    def __init__(self, wall_ms: int, monotonic_ms: int = 5_000) -> None:
        self.wall = wall_ms * MS
        self.mono = monotonic_ms * MS

    def advance(self, ms: int) -> None:
        self.wall += ms * MS
        self.mono += ms * MS

    def step_wall(self, ms: int) -> None:
        self.wall += ms * MS

    def clock(self) -> StoreClock:
        return StoreClock(wall_ns=lambda: self.wall, monotonic_ns=lambda: self.mono)


class Reference:
    """A reference clock `ahead_ms` ahead of the host; each reading takes `rtts_ms`
    (one per call) of round trip, the reading made at its midpoint."""

    def __init__(self, host: HostClocks, ahead_ms: int, rtts_ms: list[int]) -> None:
        self.host = host
        self.ahead_ms = ahead_ms
        self.rtts = list(rtts_ms)

    async def __call__(self) -> int:
        rtt = self.rtts.pop(0)
        self.host.advance(rtt // 2)
        reading = self.host.wall // MS + self.ahead_ms
        self.host.advance(rtt - rtt // 2)
        return reading


def test_before_the_first_sync_it_is_the_host_clock() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    assert clock.now_ms() == 1_700_000_000_000
    host.advance(250)
    assert clock.now_ms() == 1_700_000_000_250
    assert not clock.synced


async def test_sync_anchors_on_the_reference_and_the_monotonic_clock_carries_it() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    await clock.sync(Reference(host, ahead_ms=7_000, rtts_ms=[2, 2, 2]))
    assert clock.synced
    # Within the round trip's reach: readings at the midpoint of a 2 ms round trip.
    error = clock.now_ms() - (host.wall // MS + 7_000)
    assert abs(error) <= 1
    assert clock.uncertainty_ms <= 3  # the round trip and the reading's 1 ms resolution
    assert abs(clock.host_skew_ms() + 7_000) <= 1
    host.advance(1_234)
    assert clock.now_ms() - (host.wall // MS + 7_000) == error


async def test_a_request_delayed_before_it_is_sent_does_not_move_an_agreeing_clock() -> None:
    """A busy worker's request waits 558 ms on the client, the store reads its clock at
    once and the answer comes back in 2 ms. Taking the midpoint of the 560 ms round
    trip put cluster time 279 ms ahead (every firing 279 ms early): the host and the
    store agree, and the estimate must stay exact."""
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()

    async def delayed_send() -> int:
        host.advance(558)
        reading = host.wall // MS
        host.advance(2)
        return reading

    await clock.sync(delayed_send)
    assert clock.now_ms() == host.wall // MS
    assert clock.host_skew_ms() == 0


@pytest.mark.parametrize("ahead_ms", [8_000, -8_000])
async def test_slow_round_trips_bound_the_error_of_a_skewed_host(ahead_ms: int) -> None:
    """A host 8 s off, sampled over slow round trips (delayed on either side): cluster
    time comes within one round trip of the store's, never further."""
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    delays = [(300, 5), (5, 300), (150, 150)]  # (before the reading, after it), ms

    async def reading() -> int:
        before, after = delays.pop(0)
        host.advance(before)
        value = host.wall // MS + ahead_ms
        host.advance(after)
        return value

    await clock.sync(reading)
    assert abs(clock.now_ms() - (host.wall // MS + ahead_ms)) <= 305
    # The three intervals intersect to a narrower one than any single round trip.
    assert clock.uncertainty_ms < 300


@pytest.mark.parametrize("step_ms", [8_000, -8_000, 3_600_000])
async def test_a_step_of_the_host_wall_clock_moves_nothing(step_ms: int) -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    reference = Reference(host, ahead_ms=0, rtts_ms=[2] * 6)
    await clock.sync(reference)
    before = clock.now_ms()
    host.step_wall(step_ms)  # the monotonic clock does not step
    assert clock.now_ms() == before
    assert clock.host_skew_ms() == step_ms
    reference.ahead_ms = -step_ms  # the reference did not move: relative to the host, it did
    await clock.sync(reference)
    assert abs(clock.now_ms() - before - 6) <= 1  # only the sampling's own 6 ms passed


async def test_the_sample_with_the_shortest_round_trip_wins() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    # 400 ms and 300 ms round trips, asymmetric in truth; the 2 ms one is exact to 1 ms.
    slow = Reference(host, ahead_ms=500, rtts_ms=[400, 2, 300])
    real_call = slow.__call__
    calls = 0

    async def skewed() -> int:
        nonlocal calls
        calls += 1
        reading = await real_call()
        return reading + (150 if calls != 2 else 0)  # the slow ones read 150 ms late

    await clock.sync(skewed)
    assert abs(clock.now_ms() - (host.wall // MS + 500)) <= 1


async def test_keep_synced_survives_an_unreachable_store_and_recovers() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    outcomes: list[int | Exception] = [StoreUnavailable("down"), RuntimeError("bug")]
    synced = asyncio.Event()

    async def reference() -> int:
        if outcomes:
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
        synced.set()
        return host.wall // MS + 9_000

    task = asyncio.create_task(clock.keep_synced(reference, resync_s=0.001))
    try:
        await asyncio.wait_for(synced.wait(), 5)
        await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert not task.done() or task.cancelled()
    assert clock.now_ms() == host.wall // MS + 9_000


def test_write_timestamps_are_cluster_time_in_microseconds_and_strictly_increasing() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    clock = host.clock()
    stamps = WriteTimestamps(clock)
    first = stamps()
    assert first == 1_700_000_000_000_000
    assert [stamps() for _ in range(3)] == [first + 1, first + 2, first + 3]
    host.advance(1)
    assert stamps() == first + 1_000
    host.step_wall(-60_000)  # behind now: later writes still win
    assert stamps() > first + 1_000


def test_write_timestamps_are_unique_across_threads() -> None:
    host = HostClocks(wall_ms=1_700_000_000_000)
    stamps = WriteTimestamps(host.clock())
    seen: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        mine = [stamps() for _ in range(2_000)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == len(seen) == 8_000
