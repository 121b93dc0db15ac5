from __future__ import annotations

import dataclasses

from clockwork_svc.domain import identity, planning
from clockwork_svc.domain.model import (
    ClusterLayout,
    DeliveryResult,
    Firing,
    Outcome,
    ScheduleState,
)
from clockwork_svc.domain.spec import (
    HttpTarget,
    MisfirePolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.domain.triggers import IntervalTrigger, OnceTrigger, Trigger

LAYOUT = ClusterLayout(shard_count=16, bucket_ms=60_000, created_ms=0)
T0 = 1_800_000_000_000


def spec(trigger: Trigger, **changes: object) -> ScheduleSpec:
    base = ScheduleSpec(trigger=trigger, target=HttpTarget("https://example.com/"))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_new_one_shot_is_armed_at_its_time_and_sharded_stably() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0 + 5000)), "id", T0, LAYOUT
    )
    assert firing is not None
    assert firing.fire_at_ms == T0 + 5000 == schedule.next_fire_ms
    assert (firing.attempt, firing.seq, firing.version) == (1, 0, 1)
    assert schedule.shard == identity.shard_of("t", "k", 16) == firing.shard
    assert firing.delivery_id == identity.delivery_id("id", T0 + 5000)


def test_a_past_one_shot_fires_now_not_in_the_past() -> None:
    _, firing = planning.new_schedule("t", "k", spec(OnceTrigger(T0 - 60_000)), "id", T0, LAYOUT)
    assert firing is not None and firing.fire_at_ms == T0
    assert firing.occurrence_ms == T0 - 60_000


def test_ordering_key_chooses_the_shard() -> None:
    a, _ = planning.new_schedule("t", "a", spec(OnceTrigger(T0), ordering_key="o"), "1", T0, LAYOUT)
    b, _ = planning.new_schedule("t", "b", spec(OnceTrigger(T0), ordering_key="o"), "2", T0, LAYOUT)
    assert a.shard == b.shard == identity.shard_of("t", "o", 16)


def test_jitter_is_deterministic_and_bounded() -> None:
    s = spec(OnceTrigger(T0 + 10_000), jitter_ms=5000)
    _, f1 = planning.new_schedule("t", "k", s, "id", T0, LAYOUT)
    _, f2 = planning.new_schedule("t", "k", s, "id", T0, LAYOUT)
    assert f1 is not None and f2 is not None
    assert f1.fire_at_ms == f2.fire_at_ms
    assert T0 + 10_000 <= f1.fire_at_ms < T0 + 15_000


def test_dispatch_plans_the_next_interval_occurrence() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(IntervalTrigger(1000, count=3)), "id", T0, LAYOUT
    )
    assert firing is not None and firing.fire_at_ms == T0 + 1000
    plan = planning.plan_dispatch(schedule, firing, T0 + 1000)
    assert plan.action is planning.Action.DELIVER
    assert plan.next_firing is not None
    assert (plan.next_firing.seq, plan.next_firing.fire_at_ms) == (1, T0 + 2000)
    assert plan.progress is not None and plan.progress.fired_count == 1
    assert not plan.completes


def test_last_occurrence_completes() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(IntervalTrigger(1000, count=1)), "id", T0, LAYOUT
    )
    assert firing is not None
    plan = planning.plan_dispatch(schedule, firing, T0 + 1000)
    assert plan.next_firing is None and plan.completes


def test_stale_version_or_state_supersedes() -> None:
    schedule, firing = planning.new_schedule("t", "k", spec(OnceTrigger(T0)), "id", T0, LAYOUT)
    assert firing is not None
    for changed in (
        dataclasses.replace(schedule, version=2),
        dataclasses.replace(schedule, state=ScheduleState.PAUSED),
        dataclasses.replace(schedule, state=ScheduleState.CANCELLED),
        dataclasses.replace(schedule, id="recreated"),
    ):
        plan = planning.plan_dispatch(changed, firing, T0)
        assert plan.action is planning.Action.SUPERSEDED
    assert planning.plan_dispatch(None, firing, T0).action is planning.Action.SUPERSEDED


def test_late_beyond_relevancy_window_expires() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0), relevancy_window_ms=30_000), "id", T0, LAYOUT
    )
    assert firing is not None
    assert planning.plan_dispatch(schedule, firing, T0 + 30_000).action is (planning.Action.DELIVER)
    assert planning.plan_dispatch(schedule, firing, T0 + 30_001).action is (planning.Action.EXPIRE)


def test_misfire_fire_latest_collapses_missed_occurrences_into_one() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(IntervalTrigger(1000)), "id", T0, LAYOUT
    )
    assert firing is not None
    # The worker was down for an hour: the next firing is the latest missed occurrence.
    now = T0 + 3_600_500
    plan = planning.plan_dispatch(schedule, firing, now)
    assert plan.next_firing is not None
    assert plan.next_firing.occurrence_ms == T0 + 3_600_000
    assert plan.next_firing.fire_at_ms == now
    follow = planning.plan_dispatch(schedule, plan.next_firing, now)
    assert follow.next_firing is not None
    assert follow.next_firing.occurrence_ms == T0 + 3_601_000


def test_misfire_skip_waits_for_the_next_occurrence() -> None:
    schedule, firing = planning.new_schedule(
        "t", "k", spec(IntervalTrigger(1000), misfire=MisfirePolicy.SKIP), "id", T0, LAYOUT
    )
    assert firing is not None
    plan = planning.plan_dispatch(schedule, firing, T0 + 3_600_500)
    assert plan.next_firing is not None
    assert plan.next_firing.occurrence_ms == T0 + 3_601_000


def test_retryable_failure_schedules_a_retry_with_the_same_delivery_id() -> None:
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=2000)
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0), retry=retry), "id", T0, LAYOUT
    )
    assert firing is not None
    settled = planning.settle(schedule, firing, DeliveryResult(False, True, 503), T0, T0 + 50, 0.5)
    assert settled.execution.outcome is Outcome.RETRYING
    assert settled.retry is not None
    assert settled.retry.attempt == 2
    assert settled.retry.fire_at_ms == T0 + 2050
    assert settled.retry.delivery_id == firing.delivery_id
    assert settled.retry.firing_id != firing.firing_id
    assert settled.execution.next_attempt_ms == T0 + 2050


def test_retry_after_is_honoured_as_a_minimum() -> None:
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=100)
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0), retry=retry), "id", T0, LAYOUT
    )
    assert firing is not None
    result = DeliveryResult(False, True, 429, retry_after_ms=30_000)
    settled = planning.settle(schedule, firing, result, T0, T0, 0.0)
    assert settled.retry is not None and settled.retry.fire_at_ms == T0 + 30_000


def test_exhausted_or_permanent_failures_end_failed() -> None:
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=100)
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0), retry=retry), "id", T0, LAYOUT
    )
    assert firing is not None
    permanent = planning.settle(schedule, firing, DeliveryResult(False, False, 404), T0, T0, 0.0)
    assert permanent.execution.outcome is Outcome.FAILED and permanent.retry is None
    last = dataclasses.replace(firing, attempt=2)
    exhausted = planning.settle(schedule, last, DeliveryResult(False, True, 500), T0, T0, 0.0)
    assert exhausted.execution.outcome is Outcome.FAILED and exhausted.retry is None


def test_resume_after_pause_rearms_from_now() -> None:
    schedule, _ = planning.new_schedule("t", "k", spec(IntervalTrigger(60_000)), "id", T0, LAYOUT)
    resumed = dataclasses.replace(schedule, version=3)
    armed, firing = planning.arm(resumed, T0 + 125_000)
    assert firing is not None
    assert firing.occurrence_ms == T0 + 180_000 and firing.version == 3
    assert armed.next_fire_ms == firing.fire_at_ms


def test_retry_max_age_stops_retries_that_would_come_too_late() -> None:
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=10, initial_delay_ms=4000, max_age_ms=10_000)
    schedule, firing = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0), retry=retry), "id", T0, LAYOUT
    )
    assert firing is not None
    early = planning.settle(schedule, firing, DeliveryResult(False, True, 503), T0, T0 + 100, 0.0)
    assert early.retry is not None and early.retry.fire_at_ms == T0 + 4100
    late_firing = dataclasses.replace(firing, attempt=3)
    late = planning.settle(
        schedule, late_firing, DeliveryResult(False, True, 503), T0 + 7000, T0 + 7000, 0.0
    )
    assert late.retry is None and late.execution.outcome is Outcome.FAILED
    assert "max age" in late.execution.error


def test_upcoming_starts_at_the_pending_occurrence_even_overdue() -> None:
    every = spec(IntervalTrigger(60_000, start_ms=T0), jitter_ms=5000)
    schedule, firing = planning.new_schedule("t", "k", every, "id", T0 - 1000, LAYOUT)
    assert firing is not None and firing.occurrence_ms == T0
    # Its firing is due at T0 plus a jitter offset; asked well after that, still first.
    later = T0 + 30_000
    assert planning.upcoming(schedule, later, 3) == [T0, T0 + 60_000, T0 + 120_000]
    assert planning.upcoming(schedule, later, 0) == []
    paused = dataclasses.replace(schedule, state=ScheduleState.PAUSED)
    assert planning.upcoming(paused, later, 3) == []


def test_upcoming_of_a_one_shot_until_it_fires() -> None:
    schedule, _ = planning.new_schedule("t", "k", spec(OnceTrigger(T0)), "id", T0 - 5, LAYOUT)
    assert planning.upcoming(schedule, T0 + 10_000, 10) == [T0]
    fired = dataclasses.replace(schedule, fired_count=1)
    assert planning.upcoming(fired, T0 + 10_000, 10) == []


def test_a_triggered_run_is_outside_the_timetable() -> None:
    schedule, occurrence = planning.new_schedule(
        "t", "k", spec(IntervalTrigger(60_000, start_ms=T0)), "id", T0 - 1, LAYOUT
    )
    assert occurrence is not None
    run = planning.triggered_firing(schedule, T0, b"mine")
    assert planning.is_triggered(run) and (run.fire_at_ms, run.attempt) == (T0, 1)
    # Never an occurrence's ids, even at the occurrence's very millisecond.
    assert run.occurrence_ms == occurrence.occurrence_ms
    assert run.firing_id != occurrence.firing_id
    assert run.delivery_id != occurrence.delivery_id
    plan = planning.plan_dispatch(schedule, run, T0)
    assert plan.action is planning.Action.DELIVER
    assert (plan.next_firing, plan.progress, plan.completes) == (None, None, False)
    # A pause, an update or a completion leaves it current; a cancel supersedes it.
    for state in (ScheduleState.PAUSED, ScheduleState.COMPLETED):
        assert planning.is_current(dataclasses.replace(schedule, state=state), run)
    assert planning.is_current(dataclasses.replace(schedule, version=2), run)
    cancelled = dataclasses.replace(schedule, state=ScheduleState.CANCELLED)
    assert planning.plan_dispatch(cancelled, run, T0).action is planning.Action.SUPERSEDED
    assert not planning.is_current(dataclasses.replace(schedule, id="other"), run)


def test_a_triggered_runs_retry_and_dead_letter_keep_its_payload_and_id() -> None:
    policy = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=100)
    schedule, _ = planning.new_schedule(
        "t", "k", spec(OnceTrigger(T0 + 60_000), retry=policy), "id", T0, LAYOUT
    )
    run = planning.triggered_firing(schedule, T0, b"mine")
    failed = DeliveryResult(ok=False, retryable=True, status_code=503)
    settled = planning.settle(schedule, run, failed, T0, T0 + 5, 0.5)
    retry = settled.retry
    assert retry is not None and planning.is_triggered(retry)
    assert (retry.payload, retry.delivery_id, retry.attempt) == (b"mine", run.delivery_id, 2)
    last = planning.settle(schedule, retry, failed, T0 + 200, T0 + 205, 0.5)
    assert last.retry is None and last.execution.outcome is Outcome.FAILED
    letter = planning.dead_letter(retry, last.execution)
    again = planning.redrive_firing(schedule, letter, T0 + 1000)
    assert (again.payload, again.delivery_id) == (b"mine", run.delivery_id)
    assert planning.is_triggered(again)


def test_backfill_fires_each_past_occurrence_once_in_order_with_its_delivery_id() -> None:
    every = spec(IntervalTrigger(60_000, start_ms=T0, count=5))
    schedule, _ = planning.new_schedule("t", "k", every, "id", T0 - 1, LAYOUT)
    now = T0 + 3_600_000
    firings = planning.backfill_firings(schedule, T0 + 1, T0 + 10 * 60_000, now, 10)
    assert firings is not None
    # The trigger's count bounds it: occurrences 1..4 (the range starts after 0).
    assert [f.occurrence_ms for f in firings] == [T0 + i * 60_000 for i in (1, 2, 3, 4)]
    assert [f.fire_at_ms for f in firings] == [now, now + 1, now + 2, now + 3]
    assert [f.delivery_id for f in firings] == [
        identity.delivery_id("id", f.occurrence_ms) for f in firings
    ]
    # Outside the timetable: nothing is planned from them.
    plan = planning.plan_dispatch(schedule, firings[0], now)
    assert (plan.action, plan.next_firing, plan.progress) == (planning.Action.DELIVER, None, None)
    assert planning.backfill_firings(schedule, T0, T0 + 10 * 60_000, now, 4) is None
    assert planning.backfill_firings(schedule, T0, T0 + 4 * 60_000, now, 4) is not None


def test_an_execution_keeps_the_tenants_share_of_the_response() -> None:
    schedule, firing = planning.new_schedule("t", "k", spec(OnceTrigger(T0)), "id", T0, LAYOUT)
    assert firing is not None
    result = DeliveryResult(
        ok=True,
        retryable=False,
        status_code=200,
        response_body=b"0123456789",
        response_headers=(("X-Request-Id", "r"), ("Content-Type", "text/plain")),
    )
    kept = planning.settle(schedule, firing, result, T0, T0 + 3, 0.5, capture_bytes=4).execution
    assert kept.response_body == b"0123"
    assert kept.response_headers == (("Content-Type", "text/plain"), ("X-Request-Id", "r"))
    none = planning.settle(schedule, firing, result, T0, T0 + 3, 0.5, capture_bytes=0)
    assert none.execution.response_body == b""


def test_occurrences_left_out_by_the_misfire_policy_are_recorded_once() -> None:
    every = spec(IntervalTrigger(60_000, start_ms=T0))
    schedule, first = planning.new_schedule("t", "k", every, "id", T0 - 1, LAYOUT)
    assert first is not None
    now = T0 + 10 * 60_000 + 5  # ten minutes late: occurrences 1..10 are past
    plan = planning.plan_dispatch(schedule, first, now)
    assert plan.next_firing is not None and plan.next_firing.occurrence_ms == T0 + 10 * 60_000
    missed = planning.missed_before(schedule, first, plan.next_firing, now)
    assert missed is not None
    record, count = missed
    assert count == 9  # occurrences 1..9: the latest (10) is fired (FIRE_LATEST)
    assert record.outcome is Outcome.SKIPPED and "9 occurrences" in record.error
    assert record.occurrence_ms == T0 + 60_000
    on_time = planning.plan_dispatch(schedule, first, T0 + 5)
    assert planning.missed_before(schedule, first, on_time.next_firing, T0 + 5) is None


def test_a_firing_written_too_late_for_the_sweep_is_written_again_due_now() -> None:
    def due(at: int) -> Firing:
        _, firing = planning.new_schedule("t", f"k{at}", spec(OnceTrigger(at)), "id", at, LAYOUT)
        assert firing is not None
        return firing

    firings = [due(T0), due(T0 + 5), due(T0 + 1_500), due(T0 + 60_000)]
    # Completed 1.9 s after the first was due: every sweep still finds all of them.
    assert planning.late_rewrites(firings, T0 + planning.LATE_WRITE_MS - 100) == []
    # Completed 2.5 s after: the two due 2 s or more before are moved together, in
    # order, the earliest due at the write; the others are left as written.
    again = planning.late_rewrites(firings, T0 + 2_500)
    assert [f.schedule_key for f in again] == [f"k{T0}", f"k{T0 + 5}"]
    assert [f.fire_at_ms for f in again] == [T0 + 2_500, T0 + 2_505]
    assert [f.firing_id for f in again] == [f.firing_id for f in firings[:2]]
    assert [f.delivery_id for f in again] == [f.delivery_id for f in firings[:2]]
    assert planning.LATE_WRITE_MS < planning.SETTLE_MS
