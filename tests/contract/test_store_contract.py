"""The storage contract (clockwork_svc.abc.Store), run against every implementation."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid

from clockwork_svc.abc import Store
from clockwork_svc.domain import identity
from clockwork_svc.domain.labels import parse_selector
from clockwork_svc.domain.model import (
    DeadLetter,
    Execution,
    Firing,
    FiringKey,
    FiringRecord,
    Outcome,
    Progress,
    Schedule,
    ScheduleQuery,
    ScheduleState,
    TriggerRequest,
)
from clockwork_svc.domain.spec import (
    HttpTarget,
    MisfirePolicy,
    OverlapPolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits
from clockwork_svc.domain.triggers import CronTrigger, IntervalTrigger, OnceTrigger, Trigger
from tests.contract.conftest import LAYOUT

T0 = 1_800_000_000_000


def tenant() -> str:
    return "t-" + uuid.uuid4().hex[:10]


def fresh_shard() -> int:
    return random.randrange(LAYOUT.shard_count)


def make_schedule(tenant_name: str, key: str, **changes: object) -> Schedule:
    spec = ScheduleSpec(
        trigger=CronTrigger("*/5 * * * *", "Europe/Paris", count=3),
        target=HttpTarget("https://example.com/hook", "PUT", (("X-A", "1"), ("X-B", "2")), 2500),
        payload=b"\x00\x01binary\xff",
        retry=RetryPolicy(RetryKind.FIXED, 3, 500, 0, 0.0),
        relevancy_window_ms=60_000,
        jitter_ms=100,
        ordering_key="order-1",
        misfire=MisfirePolicy.SKIP,
    )
    base = Schedule(
        tenant=tenant_name,
        key=key,
        id=uuid.uuid4().hex,
        spec=spec,
        state=ScheduleState.ACTIVE,
        version=1,
        created_ms=T0,
        updated_ms=T0,
        shard=7,
        next_fire_ms=T0 + 5000,
        trace_parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def make_firing(shard: int, fire_at_ms: int, attempt: int = 1, **changes: object) -> Firing:
    sid = uuid.uuid4().hex
    base = Firing(
        shard=shard,
        fire_at_ms=fire_at_ms,
        firing_id=identity.firing_id(sid, 1, fire_at_ms, attempt),
        tenant="t",
        schedule_key="k",
        schedule_id=sid,
        version=1,
        seq=0,
        occurrence_ms=fire_at_ms,
        attempt=attempt,
        delivery_id=identity.delivery_id(sid, fire_at_ms),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_layout_is_fixed_at_creation(store: Store) -> None:
    assert await store.layout() == LAYOUT


async def test_server_time_is_the_stores_clock_in_ms(store: Store) -> None:
    # The servers under test run on this host: their clock is ours, within a request.
    before = time.time_ns() // 1_000_000
    server = await store.server_time_ms()
    after = time.time_ns() // 1_000_000
    assert before - 50 <= server <= after + 50


async def test_insert_and_get_round_trips_every_field(store: Store) -> None:
    s = make_schedule(tenant(), "a/b:c=d.e-f_g")
    assert await store.insert_schedule(s) is None
    assert await store.get_schedule(s.tenant, s.key) == s


async def test_round_trip_of_each_trigger_kind(store: Store) -> None:
    t = tenant()
    kinds: list[Trigger] = [
        OnceTrigger(T0),
        IntervalTrigger(1000, None, None, None),
        IntervalTrigger(5000, T0, T0 + 60_000, 4),
    ]
    for i, trig in enumerate(kinds):
        s = make_schedule(t, f"k{i}")
        s = dataclasses.replace(s, spec=dataclasses.replace(s.spec, trigger=trig))
        await store.insert_schedule(s)
        got = await store.get_schedule(t, f"k{i}")
        assert got is not None
        assert got.spec.trigger == trig


async def test_get_missing_is_none(store: Store) -> None:
    assert await store.get_schedule(tenant(), "nope") is None


async def test_insert_is_first_writer_wins(store: Store) -> None:
    t = tenant()
    first = make_schedule(t, "k")
    second = make_schedule(t, "k", id="other")
    assert await store.insert_schedule(first) is None
    assert await store.insert_schedule(second) == first
    assert await store.get_schedule(t, "k") == first


async def test_concurrent_inserts_exactly_one_wins(store: Store) -> None:
    t = tenant()
    candidates = [make_schedule(t, "race", id=f"id{i}") for i in range(8)]
    results = await asyncio.gather(*(store.insert_schedule(c) for c in candidates))
    assert sum(r is None for r in results) == 1
    winner = candidates[[r is None for r in results].index(True)]
    assert all(r == winner for r in results if r is not None)


async def test_insert_many_answers_each_in_order(store: Store) -> None:
    t = tenant()
    earlier = make_schedule(t, "k-03", id="earlier")
    assert await store.insert_schedule(earlier) is None
    # Many partitions, some holding several of the keys.
    batch = [make_schedule(t, f"k-{i:02d}", id=f"new{i}") for i in range(60)]
    batch.append(make_schedule(t, "k-07", id="duplicate"))
    results = await store.insert_schedules(batch)
    assert results[3] == earlier
    # The same key twice: one insert wins, the other answers with the winner.
    pair = [results[7], results[60]]
    assert pair.count(None) == 1
    winner = batch[7] if results[7] is None else batch[60]
    assert [r for r in pair if r is not None] == [winner]
    assert await store.get_schedule(t, "k-07") == winner
    assert [r is None for i, r in enumerate(results) if i not in (3, 7, 60)] == [True] * 58
    assert await store.get_schedule(t, "k-59") == batch[59]
    listed = [x.key for x in await store.list_schedules(t, None, 100)]
    assert listed == [f"k-{i:02d}" for i in range(60)]
    assert await store.insert_schedules([]) == []


async def test_list_is_ordered_paged_and_per_tenant(store: Store) -> None:
    t, other = tenant(), tenant()
    keys = sorted(f"key-{i:03d}" for i in range(25))
    await asyncio.gather(*(store.insert_schedule(make_schedule(t, k)) for k in reversed(keys)))
    await store.insert_schedule(make_schedule(other, "key-000"))
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_schedules(t, after, 10)
        seen += [s.key for s in page]
        if len(page) < 10:
            break
        after = page[-1].key
    assert seen == keys
    assert all(s.tenant == t for s in await store.list_schedules(t, None, 100))


async def test_replace_is_compare_and_set_on_version(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    paused = dataclasses.replace(
        s, state=ScheduleState.PAUSED, version=2, updated_ms=T0 + 1, next_fire_ms=None
    )
    assert await store.replace_schedule(paused, expected_version=1)
    assert not await store.replace_schedule(dataclasses.replace(paused, version=3), 1)
    got = await store.get_schedule(t, "k")
    assert got == paused


async def test_replace_missing_schedule_writes_nothing(store: Store) -> None:
    t = tenant()
    assert not await store.replace_schedule(make_schedule(t, "ghost", version=2), 1)
    assert await store.get_schedule(t, "ghost") is None


async def test_replace_keeps_runtime_columns_and_progress_keeps_spec(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    progress = Progress(
        next_fire_ms=T0 + 9, last_fire_ms=T0 + 8, last_outcome=Outcome.FAILED, fired_count=4
    )
    await record_progress(store, t, "k", progress)
    updated = dataclasses.replace(s, version=2, updated_ms=T0 + 10, next_fire_ms=T0 + 11)
    assert await store.replace_schedule(updated, 1)
    got = await store.get_schedule(t, "k")
    assert got is not None
    assert (got.last_fire_ms, got.last_outcome, got.fired_count) == (T0 + 8, Outcome.FAILED, 4)
    assert got.version == 2 and got.spec == s.spec and got.next_fire_ms == T0 + 11


async def test_a_pause_note_and_the_failures_in_a_row_round_trip(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    progress = Progress(T0 + 9, T0 + 8, Outcome.FAILED, 4, failures_in_row=3)
    await record_progress(store, t, "k", progress)
    got = await store.get_schedule(t, "k")
    assert got is not None and (got.failures_in_row, got.note) == (3, "")
    paused = dataclasses.replace(
        got, state=ScheduleState.PAUSED, version=2, note="ann: INC-42 \u2013 receiver down"
    )
    assert await store.replace_schedule(paused, 1)
    assert await store.get_schedule(t, "k") == paused
    [listed] = await store.list_schedules(t, None, 10)
    assert listed == paused
    resumed = dataclasses.replace(
        paused, state=ScheduleState.ACTIVE, version=3, note="", failures_in_row=0
    )
    assert await store.replace_schedule(resumed, 2)
    assert await store.get_schedule(t, "k") == resumed


async def test_labels_round_trip_and_are_replaced_whole(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k", labels=(("example.com/team", "payments"), ("tier", "")))
    await store.insert_schedule(s)
    assert await store.get_schedule(t, "k") == s
    assert await store.set_schedule_labels(t, "k", (("env", "prod"),))
    got = await store.get_schedule(t, "k")
    assert got == dataclasses.replace(s, labels=(("env", "prod"),))
    assert await store.set_schedule_labels(t, "k", ())
    assert await store.get_schedule(t, "k") == dataclasses.replace(s, labels=())
    assert not await store.set_schedule_labels(t, "missing", (("a", "b"),))
    assert await store.get_schedule(t, "missing") is None


async def search_all(
    store: Store, t: str, query: ScheduleQuery, limit: int, budget: int = 50
) -> list[str]:
    keys: list[str] = []
    after: str | None = None
    for _ in range(1000):
        page = await store.search_schedules(t, query, after, limit, budget)
        keys += [s.key for s in page.schedules]
        if page.next_after is None:
            return keys
        after = page.next_after
    raise AssertionError("the search never ended")


async def test_search_filters_by_prefix_state_and_labels_across_pages(store: Store) -> None:
    t = tenant()
    expected: dict[str, list[str]] = {"pay": [], "pay-prod": [], "a/": [], "paused": []}
    for i in range(150):
        team = "payments" if i % 3 == 0 else "search"
        env = "prod" if i % 2 == 0 else "dev"
        key = f"{'a/' if i % 5 == 0 else 'b/'}job-{i:03d}"
        state = ScheduleState.PAUSED if i % 7 == 0 else ScheduleState.ACTIVE
        await store.insert_schedule(
            make_schedule(t, key, labels=(("env", env), ("team", team)), state=state)
        )
        expected["pay"] += [key] if team == "payments" else []
        expected["pay-prod"] += [key] if team == "payments" and env == "prod" else []
        expected["a/"] += [key] if key.startswith("a/") else []
        expected["paused"] += [key] if state is ScheduleState.PAUSED else []
    await store.insert_schedule(
        make_schedule(tenant(), "a/job-000", labels=(("team", "payments"),))
    )
    for name, query in (
        ("pay", ScheduleQuery(selector=parse_selector("team=payments"))),
        ("pay-prod", ScheduleQuery(selector=parse_selector("team in (payments),env!=dev"))),
        ("a/", ScheduleQuery(prefix="a/")),
        ("paused", ScheduleQuery(states=frozenset({ScheduleState.PAUSED}))),
    ):
        want = sorted(expected[name])
        # A budget of 3 rows: pages end short, and the next one starts where the
        # last stopped looking.
        for limit, budget in ((7, 50), (1000, 50), (1000, 3)):
            got = await search_all(store, t, query, limit, budget)
            assert got == want, (name, limit, budget)
    nothing = ScheduleQuery(prefix="a/", selector=parse_selector("team=none"))
    assert await search_all(store, t, nothing, 10) == []


async def test_complete_marks_the_current_active_version_completed(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    await complete(store, s, 1, T0 + 50)
    await complete(store, s, 1, T0 + 50)  # idempotent
    got = await store.get_schedule(t, "k")
    assert got == dataclasses.replace(
        s, state=ScheduleState.COMPLETED, next_fire_ms=None, updated_ms=T0 + 50
    )
    listed = await store.list_schedules(t, None, 10)
    assert [x.state for x in listed] == [ScheduleState.COMPLETED]


async def test_complete_never_touches_a_newer_version_or_a_paused_one(store: Store) -> None:
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    updated = dataclasses.replace(s, version=2, updated_ms=T0 + 10)
    assert await store.replace_schedule(updated, 1)
    await complete(store, s, 1, T0 + 50)  # the old version's last firing
    assert await store.get_schedule(t, "k") == updated

    paused = dataclasses.replace(updated, state=ScheduleState.PAUSED, version=3)
    assert await store.replace_schedule(paused, 2)
    await complete(store, s, 3, T0 + 60)
    assert await store.get_schedule(t, "k") == paused
    resumed = dataclasses.replace(paused, state=ScheduleState.ACTIVE, version=4)
    assert await store.replace_schedule(resumed, 3)
    assert await store.get_schedule(t, "k") == resumed


async def test_a_completed_schedule_can_still_change_version(store: Store) -> None:
    """An update or cancel of a completed schedule is a compare-and-set on the version
    read, as for any other state."""
    t = tenant()
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    await complete(store, s, 1, T0 + 50)
    completed = await store.get_schedule(t, "k")
    assert completed is not None and completed.state is ScheduleState.COMPLETED
    cancelled = dataclasses.replace(
        completed, state=ScheduleState.CANCELLED, version=2, updated_ms=T0 + 70
    )
    assert await store.replace_schedule(cancelled, 1)
    assert await store.get_schedule(t, "k") == cancelled


async def test_scan_returns_firings_in_due_order_across_buckets(store: Store) -> None:
    shard = fresh_shard()
    times = [T0 + d for d in (0, 1, 59_999, 60_000, 60_001, 180_000, 3_600_000)]
    firings = [make_firing(shard, t) for t in times]
    random.shuffle(firings)
    await store.put_firings(firings)
    await store.put_firings([make_firing(shard + 1, T0 + 5)])  # another shard: invisible
    got = await store.scan_firings(shard, (T0, ""), T0 + 3_600_000, 100)
    assert [f.fire_at_ms for f in got] == times[:-1]
    assert got == sorted(firings, key=lambda f: f.sort_key)[:-1]


async def test_scan_pages_with_exclusive_start_and_limit(store: Store) -> None:
    shard = fresh_shard()
    firings = [make_firing(shard, T0 + (i // 3) * 1000) for i in range(30)]  # ties on fire_at
    await store.put_firings(firings)
    expected = sorted(firings, key=lambda f: f.sort_key)
    got: list[Firing] = []
    start = (T0, "")
    while True:
        page = await store.scan_firings(shard, start, T0 + 10_000_000, 7)
        got += page
        if len(page) < 7:
            break
        start = page[-1].sort_key
    assert got == expected


async def test_scan_spans_a_long_empty_range(store: Store) -> None:
    shard = fresh_shard()
    far = T0 + 6 * 3_600_000
    await store.put_firings([make_firing(shard, far)])
    got = await store.scan_firings(shard, (T0, ""), far + 1, 10)
    assert [f.fire_at_ms for f in got] == [far]


async def test_scan_firing_keys_matches_scan_firings(store: Store) -> None:
    shard = fresh_shard()
    times = [T0 + (i // 3) * 20_000 for i in range(30)]  # ties, and four buckets
    firings = [make_firing(shard, t) for t in times]
    await store.put_firings(firings)
    await store.mark_done(firings[4])
    # A `done` with no firing (mark_done of a firing never put) is no firing.
    await store.mark_done(make_firing(shard, T0 + 1))
    await store.put_firings([make_firing(shard + 1, T0 + 5)])  # another shard: invisible
    for start, end, limit in [((T0, ""), T0 + 10**6, 100), ((T0, ""), T0 + 10**6, 7)]:
        full = await store.scan_firings(shard, start, end, limit)
        keys = await store.scan_firing_keys(shard, start, end, limit)
        assert keys == [FiringKey(f.fire_at_ms, f.firing_id, f.done) for f in full]
    expected = sorted(firings, key=lambda f: f.sort_key)
    got: list[FiringKey] = []
    start = (T0, "")
    while page := await store.scan_firing_keys(shard, start, T0 + 100_000, 4):
        got += page
        start = page[-1].sort_key
    assert [k.sort_key for k in got] == [
        f.sort_key for f in expected if f.fire_at_ms < T0 + 100_000
    ]
    assert [k.done for k in got].count(True) == 1


async def test_put_is_idempotent_and_never_clears_done(store: Store) -> None:
    shard = fresh_shard()
    f = make_firing(shard, T0 + 100)
    await store.put_firings([f])
    await store.mark_done(f)
    await store.put_firings([f, f])
    got = await store.scan_firings(shard, (T0, ""), T0 + 1000, 10)
    assert got == [dataclasses.replace(f, done=True)]
    assert await store.get_firing(shard, f.fire_at_ms, f.firing_id) == got[0]
    assert await store.get_firing(shard, f.fire_at_ms + 1, f.firing_id) is None


async def test_new_shard_starts_at_cluster_creation(store: Store) -> None:
    shard = fresh_shard()
    assert await store.load_cursor(shard) is None
    cursor = await store.acquire_shard(shard, epoch=5)
    assert cursor is not None
    assert (cursor.position_ms, cursor.epoch) == (LAYOUT.created_ms, 5)


async def test_cursor_moves_forward_only_and_is_fenced_by_epoch(store: Store) -> None:
    shard = fresh_shard()
    assert await store.acquire_shard(shard, 10) is not None
    assert await store.advance_cursor(shard, T0, 10)
    assert await store.advance_cursor(shard, T0 - 5, 10)  # accepted but not backwards
    assert await store.advance_cursor(shard, T0, 10)  # same position: an epoch check
    cursor = await store.load_cursor(shard)
    assert cursor is not None and cursor.position_ms == T0
    # A newer owner takes over: the old epoch can no longer advance the shard.
    taken = await store.acquire_shard(shard, 11)
    assert taken is not None and taken.position_ms == T0 and taken.epoch == 11
    assert not await store.advance_cursor(shard, T0 + 1000, 10)
    assert await store.acquire_shard(shard, 10) is None
    cursor = await store.load_cursor(shard)
    assert cursor is not None and (cursor.position_ms, cursor.epoch) == (T0, 11)
    assert await store.advance_cursor(shard, T0 + 2000, 11)


async def test_concurrent_acquire_highest_epoch_ends_owner(store: Store) -> None:
    shard = fresh_shard()
    results = await asyncio.gather(*(store.acquire_shard(shard, e) for e in range(1, 9)))
    cursor = await store.load_cursor(shard)
    assert cursor is not None and cursor.epoch == 8
    assert results[-1] is not None
    assert not await store.advance_cursor(shard, T0, 3)


async def test_executions_newest_first_and_paged(store: Store) -> None:
    t = tenant()
    executions = [
        Execution(
            tenant=t,
            schedule_key="k",
            firing_id=f"f{i:02d}",
            delivery_id="msg_1",
            attempt=i + 1,
            occurrence_ms=T0,
            due_ms=T0 + i,
            started_ms=T0 + i * 86_400_000 // 5,
            duration_ms=12,
            outcome=Outcome.RETRYING if i < 11 else Outcome.SUCCEEDED,
            status_code=503 if i < 11 else 200,
            error="boom" if i < 11 else "",
            next_attempt_ms=T0 + i + 1 if i < 11 else None,
            # Some with a kept response (binary, with headers), some without.
            response_body=b"\x00busy\xff" if i % 2 else b"",
            response_headers=(("Content-Type", "text/plain"), ("X-Request-Id", f"r{i}"))
            if i % 3
            else (),
        )
        for i in range(12)
    ]
    for e in executions:
        await record_execution(store, e)
    await record_execution(store, executions[0])  # idempotent
    await record_execution(store, dataclasses.replace(executions[0], schedule_key="other"))
    got: list[Execution] = []
    before: tuple[int, str] | None = None
    while True:
        page = await store.list_executions(t, "k", before, 5)
        got += page
        if len(page) < 5:
            break
        before = (page[-1].started_ms, page[-1].firing_id)
    assert got == list(reversed(executions))


def make_tenant(name: str, **changes: object) -> Tenant:
    base = Tenant(
        name=name,
        created_ms=T0,
        updated_ms=T0,
        version=1,
        signing_secrets=("whsec_b25l", "whsec_dHdv"),
        token_hashes=("h1", "h2"),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_tenant_insert_get_and_first_writer_wins(store: Store) -> None:
    t = make_tenant(tenant())
    assert await store.insert_tenant(t) is None
    assert await store.get_tenant(t.name) == t
    assert await store.insert_tenant(make_tenant(t.name, created_ms=1)) == t
    assert await store.get_tenant("missing-" + t.name) is None


async def test_tenant_replace_is_compare_and_set(store: Store) -> None:
    t = make_tenant(tenant())
    await store.insert_tenant(t)
    rotated = dataclasses.replace(
        t,
        version=2,
        signing_secrets=("whsec_bmV3", *t.signing_secrets),
        limits=TenantLimits(rate_per_s=2.5, burst=4, max_concurrency=3, paused=True),
        defaults=TenantDefaults(RetryPolicy(RetryKind.FIXED, 3, 500), 60_000),
    )
    assert await store.replace_tenant(rotated, 1)
    assert not await store.replace_tenant(dataclasses.replace(rotated, version=3), 1)
    assert await store.get_tenant(t.name) == rotated
    assert not await store.replace_tenant(make_tenant("ghost-" + t.name), 1)


async def test_tenants_list_pages_without_gaps(store: Store) -> None:
    names = {tenant() for _ in range(7)}
    for name in names:
        await store.insert_tenant(make_tenant(name, token_hashes=()))
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_tenants(after, 3)
        seen += [t.name for t in page]
        if len(page) < 3:
            break
        after = page[-1].name
    assert len(seen) == len(set(seen))
    assert names <= set(seen)


async def test_token_owner_index(store: Store) -> None:
    name = tenant()
    assert await store.token_owner("hash-" + name) is None
    await store.put_token_owner("hash-" + name, name)
    await store.put_token_owner("hash-" + name, name)
    assert await store.token_owner("hash-" + name) == name


def make_letter(tenant_name: str, dead_ms: int, key: str = "k", **changes: object) -> DeadLetter:
    base = DeadLetter(
        tenant=tenant_name,
        schedule_key=key,
        schedule_id="sid",
        firing_id=uuid.uuid4().hex,
        delivery_id="msg_x",
        shard=3,
        seq=2,
        occurrence_ms=dead_ms - 5000,
        attempts=5,
        dead_ms=dead_ms,
        last_status=503,
        last_error="HTTP 503: busy",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_redrive_generation_round_trips(store: Store) -> None:
    shard = fresh_shard()
    f = make_firing(shard, T0 + 10, redrive=T0)
    await store.put_firings([f])
    assert await store.scan_firings(shard, (T0, ""), T0 + 100, 10) == [f]


async def test_dead_letters_listed_by_time_range_in_order_and_paged(store: Store) -> None:
    t = tenant()
    now = int(time.time() * 1000)
    # Spread over three days, inside the retention.
    times = [now - 2 * 86_400_000 + i * 3_600_000 * 5 for i in range(10)]
    letters = [make_letter(t, ms) for ms in times]
    for letter in reversed(letters):
        await record_dead_letter(store, letter)
    await record_dead_letter(store, make_letter(tenant(), times[0]))  # other tenant
    got: list[DeadLetter] = []
    after: tuple[int, str] | None = None
    while True:
        page = await store.list_dead_letters(t, times[0], now + 1, after, 4)
        got += page
        if len(page) < 4:
            break
        after = page[-1].sort_key
    assert got == letters
    window = await store.list_dead_letters(t, times[2], times[5], None, 100)
    assert window == letters[2:5]


async def test_mark_redriven_survives_a_repeated_record(store: Store) -> None:
    t = tenant()
    letter = make_letter(t, int(time.time() * 1000))
    await record_dead_letter(store, letter)
    await store.mark_redriven(letter, letter.dead_ms + 10)
    await record_dead_letter(store, letter)
    [got] = await store.list_dead_letters(t, letter.dead_ms, letter.dead_ms + 1, None, 10)
    assert got == dataclasses.replace(letter, redriven_ms=letter.dead_ms + 10)


async def test_ordering_key_round_trips_on_firings(store: Store) -> None:
    shard = fresh_shard()
    f = make_firing(shard, T0 + 10, ordering_key="order-9")
    await store.put_firings([f])
    assert await store.scan_firings(shard, (T0, ""), T0 + 100, 10) == [f]


async def test_a_firings_own_payload_round_trips(store: Store) -> None:
    shard = fresh_shard()
    own = make_firing(
        shard, T0 + 10, seq=-1, payload=b"\x00override\xff", overlap=OverlapPolicy.SKIP
    )
    empty = make_firing(shard, T0 + 20, seq=-1, payload=b"")
    await store.put_firings([own, empty])
    assert await store.scan_firings(shard, (T0, ""), T0 + 100, 10) == [own, empty]
    assert await store.get_firing(shard, T0 + 20, empty.firing_id) == empty


async def test_a_dead_letters_own_payload_round_trips(store: Store) -> None:
    t = tenant()
    letter = make_letter(t, int(time.time() * 1000), seq=-1, payload=b"override")
    await record_dead_letter(store, letter)
    assert await store.list_dead_letters(t, letter.dead_ms, letter.dead_ms + 1, None, 10) == [
        letter
    ]


def make_trigger_request(t: str, request_id: str, created_ms: int) -> TriggerRequest:
    return TriggerRequest(
        t, "job", request_id, fresh_shard(), created_ms, uuid.uuid4().hex, "msg_x", 3, created_ms
    )


async def test_a_trigger_request_id_is_claimed_once_and_confirmed(store: Store) -> None:
    t = tenant()
    now = int(time.time() * 1000)
    first = make_trigger_request(t, "req-1", now)
    assert await store.claim_trigger(first) == first
    repeat = make_trigger_request(t, "req-1", now + 50)
    assert await store.claim_trigger(repeat) == first
    await store.confirm_trigger(first)
    assert await store.claim_trigger(repeat) == dataclasses.replace(first, written=True)
    other_id = make_trigger_request(t, "req-2", now)
    assert await store.claim_trigger(other_id) == other_id
    other_tenant = dataclasses.replace(first, tenant=tenant())
    assert await store.claim_trigger(other_tenant) == other_tenant


async def test_concurrent_claims_of_a_trigger_request_id_agree(store: Store) -> None:
    t = tenant()
    now = int(time.time() * 1000)
    tries = [make_trigger_request(t, "race", now + i) for i in range(6)]
    answers = await asyncio.gather(*(store.claim_trigger(r) for r in tries))
    assert len(set(answers)) == 1 and answers[0] in tries


async def test_ordering_blocks_are_set_replaced_and_cleared(store: Store) -> None:
    t = tenant()
    assert await store.get_ordering_block(t, "k") == ""
    await store.set_ordering_block(t, "k", "msg_1")
    await store.set_ordering_block(t, "other", "msg_9")
    assert await store.get_ordering_block(t, "k") == "msg_1"
    await store.set_ordering_block(t, "k", "msg_2")
    assert await store.get_ordering_block(t, "k") == "msg_2"
    await store.set_ordering_block(t, "k", "")
    assert await store.get_ordering_block(t, "k") == ""
    assert await store.get_ordering_block(t, "other") == "msg_9"


def make_execution(t: str, key: str, started_ms: int, outcome: Outcome) -> Execution:
    return Execution(
        tenant=t,
        schedule_key=key,
        firing_id=uuid.uuid4().hex,
        delivery_id="msg_r",
        attempt=2,
        occurrence_ms=started_ms - 10,
        due_ms=started_ms - 5,
        started_ms=started_ms,
        duration_ms=7,
        outcome=outcome,
        status_code=500 if outcome is Outcome.FAILED else 200,
        error="HTTP 500" if outcome is Outcome.FAILED else "",
    )


# A firing's record (`Store.record_firing`) written for the one part a test looks at.


async def record_progress(store: Store, t: str, key: str, progress: Progress) -> None:
    await store.record_firing(FiringRecord(make_execution(t, key, T0, Outcome.SUCCEEDED), progress))


async def complete(store: Store, s: Schedule, version: int, at_ms: int) -> None:
    """The record of the last firing of `s` at `version`, its progress as it stands."""
    progress = Progress(s.next_fire_ms, s.last_fire_ms, s.last_outcome, s.fired_count)
    execution = make_execution(s.tenant, s.key, at_ms, Outcome.SUCCEEDED)
    record = FiringRecord(execution, progress, completes_version=version, completed_ms=at_ms)
    await store.record_firing(record)


async def record_execution(store: Store, e: Execution) -> None:
    await store.record_firing(FiringRecord(e, Progress(None, e.occurrence_ms, e.outcome, 1)))


async def record_dead_letter(store: Store, letter: DeadLetter) -> None:
    execution = make_execution(letter.tenant, letter.schedule_key, letter.dead_ms, Outcome.FAILED)
    progress = Progress(None, letter.occurrence_ms, Outcome.FAILED, 1)
    await store.record_firing(FiringRecord(execution, progress, dead_letter=letter))


async def test_record_firing_writes_every_part(store: Store) -> None:
    t = tenant()
    now = int(time.time() * 1000)
    s = make_schedule(t, "k")
    await store.insert_schedule(s)
    await store.set_ordering_block(t, "order-1", "msg_r")
    failed = make_execution(t, "k", now, Outcome.FAILED)
    letter = make_letter(t, now, firing_id=failed.firing_id)
    progress = Progress(None, now - 10, Outcome.FAILED, 3)
    record = FiringRecord(
        failed,
        progress,
        completes_version=1,
        completed_ms=now + 7,
        dead_letter=letter,
        ordering_key="order-1",
        ordering_block="",
    )
    await store.record_firing(record)
    await store.record_firing(record)  # idempotent
    assert await store.get_schedule(t, "k") == dataclasses.replace(
        s,
        state=ScheduleState.COMPLETED,
        updated_ms=max(s.updated_ms, now + 7),
        next_fire_ms=None,
        last_fire_ms=now - 10,
        last_outcome=Outcome.FAILED,
        fired_count=3,
    )
    assert await store.list_executions(t, "k", None, 10) == [failed]
    assert await store.list_dead_letters(t, now, now + 1, None, 10) == [letter]
    assert await store.get_ordering_block(t, "order-1") == ""

    # A schedule that goes on: progress only; the ordering block is left as it is.
    other = make_schedule(t, "k2")
    await store.insert_schedule(other)
    await store.set_ordering_block(t, "order-1", "msg_9")
    ok = make_execution(t, "k2", now + 1, Outcome.SUCCEEDED)
    await store.record_firing(FiringRecord(ok, Progress(T0 + 9000, now, Outcome.SUCCEEDED, 1)))
    assert await store.get_schedule(t, "k2") == dataclasses.replace(
        other,
        next_fire_ms=T0 + 9000,
        last_fire_ms=now,
        last_outcome=Outcome.SUCCEEDED,
        fired_count=1,
    )
    assert await store.list_executions(t, "k2", None, 10) == [ok]
    assert await store.list_dead_letters(t, now + 1, now + 2, None, 10) == []
    assert await store.get_ordering_block(t, "order-1") == "msg_9"
