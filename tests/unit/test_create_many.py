"""Batched creates (`Scheduling.create_many`): each entry answered as a create alone
would answer it, and a store failure between the schedules and their first firings
leaves nothing unarmed once the batch is retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from clockwork_svc.abc import Clock, SystemClock
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout, Created, Firing, NewSchedule, Schedule
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, Limits, ScheduleSpec
from clockwork_svc.errors import AlreadyExists, InvalidArgument, StoreUnavailable
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.storage.sqlite import SqliteStore

CLOCK = SystemClock()
LAYOUT = ClusterLayout(shard_count=8, bucket_ms=60_000, created_ms=0)


def once(at_ms: int, url: str = "http://127.0.0.1:9/hook") -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(at_ms), HttpTarget(url))


class FlakyFirings(SqliteStore):
    """The embedded store, except that the next `failures` firing writes fail, and
    the inserts of the keys in `unwritable` are answered with an error (as the
    Cassandra store answers the schedules of a partition it could not write)."""

    failures = 0
    unwritable: frozenset[str] = frozenset()

    async def insert_schedules(
        self, schedules: Sequence[Schedule]
    ) -> list[Schedule | StoreUnavailable | None]:
        fine = [s for s in schedules if s.key not in self.unwritable]
        answers = iter(await super().insert_schedules(fine))
        return [
            StoreUnavailable("injected: partition not written")
            if s.key in self.unwritable
            else next(answers)
            for s in schedules
        ]

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("injected: firing write failed")
        await super().put_firings(firings)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FlakyFirings]:
    opened = await SqliteStore.open(tmp_path / "db", LAYOUT)
    flaky = FlakyFirings(opened._conn, opened._executor)
    try:
        yield flaky
    finally:
        await flaky.close()


def scheduling(store: SqliteStore, clock: Clock = CLOCK) -> Scheduling:
    return Scheduling(store, clock, LAYOUT, Limits(), AddressPolicy(allow_loopback=True))


async def firings(store: SqliteStore) -> list[Firing]:
    """Every firing row stored, in every shard."""
    return [
        f
        for shard in range(LAYOUT.shard_count)
        for f in await store.scan_firings(shard, (0, ""), 2**62, 99)
    ]


async def armed(store: SqliteStore, key: str) -> bool:
    schedule = await store.get_schedule("t", key)
    assert schedule is not None and schedule.next_fire_ms is not None
    return any(f.schedule_key == key for f in await firings(store))


async def test_each_entry_is_answered_as_alone(store: FlakyFirings) -> None:
    api = scheduling(store)
    due = CLOCK.now_ms() + 3_600_000
    await api.create("t", "same", once(due))
    await api.create("t", "other", once(due))
    results = await api.create_many(
        "t",
        [
            NewSchedule("fresh", once(due)),
            NewSchedule("bad key\n", once(due)),
            NewSchedule("same", once(due)),
            NewSchedule("other", once(due + 1)),
            NewSchedule("twice", once(due)),
            NewSchedule("twice", once(due)),
        ],
    )
    fresh, bad, same, other, twice_a, twice_b = results
    assert isinstance(fresh, Created) and fresh.created
    assert isinstance(bad, InvalidArgument) and bad.field == "key"
    assert isinstance(same, Created) and not same.created
    assert isinstance(other, AlreadyExists)
    assert isinstance(twice_a, Created) and isinstance(twice_b, Created)
    assert sorted([twice_a.created, twice_b.created]) == [False, True]
    assert twice_a.schedule.id == twice_b.schedule.id
    for key in ("fresh", "same", "twice"):
        assert await armed(store, key)


async def test_a_failed_firing_write_fails_the_new_entries_and_a_retry_arms_them(
    store: FlakyFirings,
) -> None:
    api = scheduling(store)
    due = CLOCK.now_ms() + 3_600_000
    requests = [NewSchedule(f"k{i}", once(due)) for i in range(5)]
    store.failures = 1
    first = await api.create_many("t", requests)
    assert all(isinstance(r, StoreUnavailable) for r in first)
    # The schedules were inserted; their first firings were not.
    assert not any([await armed(store, r.key) for r in requests])
    again = await api.create_many("t", requests)
    assert [isinstance(r, Created) and not r.created for r in again] == [True] * 5
    assert all([await armed(store, r.key) for r in requests])


async def test_concurrent_unary_creates_are_answered_as_alone(store: FlakyFirings) -> None:
    """Concurrent `create` calls go out as one batch (create_batching): among 40 keys,
    one key three times with two specs: exactly one spec is stored, the call with the
    other is refused, every created schedule is armed."""
    api = scheduling(store)
    due = CLOCK.now_ms() + 3_600_000
    calls = [api.create("t", f"k{i}", once(due)) for i in range(40)]
    calls += [
        api.create("t", "dup", once(due, url))
        for url in ("http://a.test/", "http://b.test/", "http://a.test/")
    ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, Created) and r.created for r in results[:40])
    accepted = [r for r in results[40:] if isinstance(r, Created)]
    refused = [r for r in results[40:] if isinstance(r, AlreadyExists)]
    assert len(accepted) + len(refused) == 3 and refused
    assert [r.created for r in accepted].count(True) == 1
    stored = await store.get_schedule("t", "dup")
    assert stored is not None and all(r.schedule.spec == stored.spec for r in accepted)
    assert all([await armed(store, k) for k in [f"k{i}" for i in range(40)] + ["dup"]])


async def test_a_failed_firing_write_fails_each_concurrent_create_and_a_retry_arms_it(
    store: FlakyFirings,
) -> None:
    api = scheduling(store)
    due = CLOCK.now_ms() + 3_600_000
    keys = [f"u{i}" for i in range(6)]
    store.failures = 1
    first = await asyncio.gather(
        *(api.create("t", k, once(due)) for k in keys), return_exceptions=True
    )
    assert all(isinstance(r, StoreUnavailable) for r in first)
    again = await asyncio.gather(*(api.create("t", k, once(due)) for k in keys))
    assert [r.created for r in again] == [False] * 6
    assert all([await armed(store, k) for k in keys])


async def test_schedules_the_store_could_not_write_fail_alone_and_a_retry_creates_them(
    store: FlakyFirings,
) -> None:
    api = scheduling(store)
    due = CLOCK.now_ms() + 3_600_000
    requests = [NewSchedule(f"p{i}", once(due)) for i in range(6)]
    store.unwritable = frozenset({"p1", "p4"})
    first = await api.create_many("t", requests)
    failed = [
        r.key for r, answer in zip(requests, first, strict=True) if not isinstance(answer, Created)
    ]
    assert failed == ["p1", "p4"]
    assert all(isinstance(first[i], StoreUnavailable) for i in (1, 4))
    assert all([await armed(store, f"p{i}") for i in (0, 2, 3, 5)])
    assert await store.get_schedule("t", "p1") is None
    store.unwritable = frozenset()
    again = await api.create_many("t", requests)
    assert [isinstance(r, Created) and r.created for r in again] == [
        False,
        True,
        False,
        False,
        True,
        False,
    ]
    assert all([await armed(store, r.key) for r in requests])


class SteppedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


class SlowStore(FlakyFirings):
    """Schedules' inserts that take `insert_ms` of the clock (a loaded store's Paxos),
    and firing writes whose next `slow_writes` take `write_ms` of it."""

    clock: SteppedClock
    insert_ms = 0
    slow_writes = 0
    write_ms = 0

    async def insert_schedules(
        self, schedules: Sequence[Schedule]
    ) -> list[Schedule | StoreUnavailable | None]:
        answers = await super().insert_schedules(schedules)
        self.clock.ms += self.insert_ms
        return answers

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        await super().put_firings(firings)
        if self.slow_writes:
            self.slow_writes -= 1
            self.clock.ms += self.write_ms


def slowed(store: FlakyFirings, start_ms: int) -> tuple[SlowStore, Scheduling]:
    """The store behind `store`, on a clock stepped by hand from `start_ms`, and the
    api over it."""
    slow = SlowStore(store._conn, store._executor)
    slow.clock = SteppedClock(start_ms)
    return slow, scheduling(slow, slow.clock)


async def test_a_slow_insert_does_not_leave_a_first_firing_due_in_the_past(
    store: FlakyFirings,
) -> None:
    """A first firing due at the create's start (a one-shot due now or earlier) is
    written due when it is written, not when the create began: a worker's sweep
    looks back only its settle window (3 s) for rows written late."""
    start = CLOCK.now_ms()
    slow, api = slowed(store, start)
    slow.insert_ms = 5_000
    results = await api.create_many(
        "t", [NewSchedule("past", once(start - 60_000)), NewSchedule("later", once(start + 60_000))]
    )
    assert all(isinstance(r, Created) and r.created for r in results)
    written = {f.schedule_key: f for f in await firings(store)}
    assert written["past"].fire_at_ms == start + 5_000
    assert written["past"].occurrence_ms == start - 60_000
    assert written["later"].fire_at_ms == start + 60_000


async def test_a_repeat_of_a_slow_create_finds_its_re_timed_firing(store: FlakyFirings) -> None:
    """The create's answer was lost after its overdue firing was written late (due at
    the write): a repeat finds that row and writes no other while a sweep still
    reads it; once it is older than that and still not done (a write applied after
    the call gave up on it), the repeat writes it again, due now."""
    start = CLOCK.now_ms()
    slow, api = slowed(store, start)
    slow.insert_ms = 5_000
    request = [NewSchedule("past", once(start - 60_000))]

    async def rows() -> list[int]:
        return [f.fire_at_ms for f in await firings(store) if f.schedule_key == "past"]

    first = await api.create_many("t", request)
    assert isinstance(first[0], Created) and first[0].created
    assert await rows() == [start + 5_000]
    slow.insert_ms = 0
    slow.clock.ms += 1_000
    again = await api.create_many("t", request)
    assert isinstance(again[0], Created) and not again[0].created
    assert await rows() == [start + 5_000]
    slow.clock.ms += 3_000
    await api.create_many("t", request)
    assert await rows() == [start + 5_000, start + 9_000]


async def test_a_firing_write_slower_than_the_sweep_allows_is_written_again_due_now(
    store: FlakyFirings,
) -> None:
    start = CLOCK.now_ms()
    slow, api = slowed(store, start)
    slow.slow_writes, slow.write_ms = 1, 2_500
    results = await api.create_many(
        "t", [NewSchedule("now", once(start)), NewSchedule("later", once(start + 60_000))]
    )
    assert all(isinstance(r, Created) and r.created for r in results)
    rows = [(f.schedule_key, f.fire_at_ms) for f in await firings(store)]
    assert sorted(rows) == [("later", start + 60_000), ("now", start), ("now", start + 2_500)]
