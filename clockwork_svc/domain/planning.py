"""Pure decisions of the scheduler: what to write when a schedule is created,
changed or fired, and what a delivery result means.

The API and the worker call these and perform the writes they describe; nothing
here reads a clock or touches storage.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from clockwork_svc.domain import identity, retry, triggers
from clockwork_svc.domain.labels import Labels
from clockwork_svc.domain.model import (
    DEFAULT_RESPONSE_CAPTURE_BYTES,
    ClusterLayout,
    DeadLetter,
    DeliveryResult,
    Execution,
    Firing,
    Outcome,
    Progress,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.spec import MisfirePolicy, OverlapPolicy, ScheduleSpec

SETTLE_MS = 3_000
"""How far behind now a worker's sweep looks for firing rows written late: a firing
row must be readable within this long of its due time, or no sweep finds it."""
LATE_WRITE_MS = SETTLE_MS - 1_000
"""A writer whose firing write completes this long or more after the firing's due
time writes it again, due now (`late_rewrites`): the first write may have become
readable behind every sweep. The second only is certain to be read; if the first was
read too, the occurrence is delivered twice under one delivery id (at least once)."""


def late_rewrites(firings: Sequence[Firing], written_ms: int) -> list[Firing]:
    """The firings of a write completed at `written_ms` that must be written again,
    each due `written_ms` or later, in their order: those due `LATE_WRITE_MS` or more
    before it, moved together by one shift that makes the earliest due then."""
    late = [f for f in firings if f.fire_at_ms <= written_ms - LATE_WRITE_MS]
    if not late:
        return []
    shift = written_ms - min(f.fire_at_ms for f in late)
    return [dataclasses.replace(f, fire_at_ms=f.fire_at_ms + shift) for f in late]


READ_AHEAD_MS = 250
"""How long before its due time a worker reads a firing's schedule.

The read (is the schedule still active, at this version?) is the one store round
trip between a firing's due time and its delivery; done ahead, the delivery leaves
at the due time and a slow read does not add to the firing lag. What keeps this
safe: the api holds the acknowledgement of every change to an active schedule
(update, pause, cancel) for `READ_AHEAD_MS` after the change is written. A read that
missed the change was made before it was written, for an occurrence due at most
`READ_AHEAD_MS` after the read, so before the acknowledgement: the promise "an
occurrence due after the change was acknowledged is never sent under the old
version" holds. Both sides use this one constant.
"""

# How far back FIRE_LATEST looks with a jump before iterating occurrence by occurrence.
_CATCH_UP_JUMP_MS = 3_600_000
_CATCH_UP_MAX_STEPS = 10_000


def effective_trigger(schedule: Schedule) -> triggers.Trigger:
    return triggers.normalize(schedule.spec.trigger, schedule.created_ms)


def routing_key(key: str, spec: ScheduleSpec) -> str:
    return spec.ordering_key or key


TRIGGERED_SEQ = -1
"""The `seq` of a triggered run (trigger-now): outside the timetable, it has no place
in the schedule's sequence of occurrences."""


def is_triggered(firing: Firing) -> bool:
    return firing.seq == TRIGGERED_SEQ


def make_firing(
    schedule: Schedule,
    seq: int,
    occurrence_ms: int,
    attempt: int,
    fire_at_ms: int,
    redrive: int = 0,
    payload: bytes | None = None,
) -> Firing:
    triggered = seq == TRIGGERED_SEQ
    return Firing(
        shard=schedule.shard,
        fire_at_ms=fire_at_ms,
        firing_id=identity.firing_id(
            schedule.id, schedule.version, occurrence_ms, attempt, redrive, triggered
        ),
        tenant=schedule.tenant,
        schedule_key=schedule.key,
        schedule_id=schedule.id,
        version=schedule.version,
        seq=seq,
        occurrence_ms=occurrence_ms,
        attempt=attempt,
        delivery_id=identity.delivery_id(schedule.id, occurrence_ms, triggered),
        redrive=redrive,
        ordering_key=schedule.spec.ordering_key,
        payload=payload,
        overlap=schedule.spec.overlap,
    )


def sequence_key(firing: Firing) -> str:
    """The key under which the worker sends a firing only after the previous delivery
    ended ("": not sequenced): its ordering key, or, for a schedule with an overlap
    policy, the schedule itself ('#' keeps it apart from every ordering key)."""
    if firing.ordering_key:
        return firing.ordering_key
    if firing.overlap is not OverlapPolicy.ALLOW_ALL:
        return "#" + firing.schedule_key
    return ""


def skipped(firing: Firing, now_ms: int, reason: str) -> Execution:
    """The record of an occurrence not sent (`reason` says why)."""
    return dataclasses.replace(expired(firing, now_ms), outcome=Outcome.SKIPPED, error=reason)


def triggered_firing(schedule: Schedule, now_ms: int, payload: bytes | None) -> Firing:
    """A run of the schedule now, outside its timetable (trigger-now): its first
    attempt, due now, its occurrence time the trigger's."""
    return make_firing(schedule, TRIGGERED_SEQ, now_ms, 1, now_ms, payload=payload)


def occurrence_firing(schedule: Schedule, seq: int, occurrence_ms: int, now_ms: int) -> Firing:
    """The first attempt of an occurrence; never due before `now_ms`.

    Clamping to now matters: a shard's cursor may already have moved past an
    earlier time, and a row written behind the cursor would never be scanned.
    """
    delivery = identity.delivery_id(schedule.id, occurrence_ms)
    due = occurrence_ms + identity.jitter_offset_ms(delivery, schedule.spec.jitter_ms)
    return make_firing(schedule, seq, occurrence_ms, 1, max(due, now_ms))


def new_schedule(
    tenant: str,
    key: str,
    spec: ScheduleSpec,
    schedule_id: str,
    now_ms: int,
    layout: ClusterLayout,
    labels: Labels = (),
) -> tuple[Schedule, Firing | None]:
    schedule = Schedule(
        tenant=tenant,
        key=key,
        id=schedule_id,
        spec=spec,
        state=ScheduleState.ACTIVE,
        version=1,
        created_ms=now_ms,
        updated_ms=now_ms,
        shard=identity.shard_of(tenant, routing_key(key, spec), layout.shard_count),
        labels=labels,
    )
    return arm(schedule, now_ms)


def arm(schedule: Schedule, now_ms: int) -> tuple[Schedule, Firing | None]:
    """The schedule's first firing from now on (create, resume, update).

    A one-shot whose time has passed fires at once; a recurring schedule continues
    with its first occurrence at or after now. Without one, the schedule is complete.
    """
    trigger = effective_trigger(schedule)
    found: tuple[int, int] | None
    if isinstance(trigger, triggers.OnceTrigger):
        found = None if schedule.fired_count else (0, trigger.at_ms)
    else:
        found = triggers.first_at_or_after(trigger, now_ms)
    if found is None:
        done = dataclasses.replace(schedule, state=ScheduleState.COMPLETED, next_fire_ms=None)
        return done, None
    seq, occurrence_ms = found
    firing = occurrence_firing(schedule, seq, occurrence_ms, now_ms)
    return dataclasses.replace(schedule, next_fire_ms=firing.fire_at_ms), firing


def upcoming(schedule: Schedule, now_ms: int, limit: int) -> list[int]:
    """The nominal times (before jitter) of the schedule's next `limit` occurrences:
    the pending one first, even when it is overdue. Empty unless the schedule is
    active; short when its trigger runs out (count or end)."""
    if schedule.state is not ScheduleState.ACTIVE or limit <= 0:
        return []
    trigger = effective_trigger(schedule)
    if isinstance(trigger, triggers.OnceTrigger):
        return [] if schedule.fired_count else [trigger.at_ms]
    start = now_ms
    if schedule.next_fire_ms is not None:
        # The pending firing is due at its occurrence plus a jitter offset (or later,
        # when it was written behind its time): look back by the jitter to find it.
        start = min(now_ms, schedule.next_fire_ms - schedule.spec.jitter_ms)
    return triggers.upcoming(trigger, start, limit)


def preview(trigger: triggers.Trigger, from_ms: int, limit: int) -> list[int]:
    """The occurrence times a new schedule with this trigger would have if it were
    created at `from_ms` (a dry run of the trigger)."""
    return triggers.upcoming(triggers.normalize(trigger, from_ms), from_ms, limit)


def backfill_firings(
    schedule: Schedule, start_ms: int, end_ms: int, now_ms: int, limit: int
) -> list[Firing] | None:
    """First attempts of the occurrences the schedule had in [start, end), each with
    the delivery id it had, due now one millisecond apart (so in order), outside the
    timetable (a redrive generation: no next occurrence is planned from them). None
    when the range holds more than `limit`."""
    trigger = effective_trigger(schedule)
    found = [o for o in triggers.occurrences(trigger, start_ms, limit + 1) if o[1] < end_ms]
    if len(found) > limit:
        return None
    return [
        make_firing(schedule, seq, occurrence_ms, 1, now_ms + i, redrive=now_ms)
        for i, (seq, occurrence_ms) in enumerate(found)
    ]


class Action(enum.Enum):
    DELIVER = "deliver"
    EXPIRE = "expire"
    # The schedule changed (update, pause, cancel, re-creation) after this firing was written.
    SUPERSEDED = "superseded"


@dataclass(frozen=True, slots=True)
class Dispatch:
    action: Action
    next_firing: Firing | None = None
    progress: Progress | None = None
    completes: bool = False


def is_current(schedule: Schedule | None, firing: Firing) -> bool:
    """Whether a firing still stands for its schedule.

    A redriven dead letter was asked for explicitly after the fact, so a later change
    of the schedule's spec (version) does not supersede it; a cancellation or pause does.
    A triggered run was asked for explicitly too, on a schedule in any state but
    cancelled: only a cancellation (or the schedule's deletion) supersedes it.
    """
    if is_triggered(firing):
        return (
            schedule is not None
            and schedule.id == firing.schedule_id
            and schedule.state is not ScheduleState.CANCELLED
        )
    return (
        schedule is not None
        and schedule.id == firing.schedule_id
        and (firing.redrive > 0 or schedule.version == firing.version)
        and schedule.state in (ScheduleState.ACTIVE, ScheduleState.COMPLETED)
    )


def plan_dispatch(
    schedule: Schedule | None,
    firing: Firing,
    now_ms: int,
    held_ms: int = 0,
) -> Dispatch:
    """Decide what to do with a due firing, and plan the schedule's next occurrence.

    The next occurrence is planned when the first attempt is dispatched (not when it
    finishes), so a crash during delivery cannot lose the recurrence and retries do
    not delay it.
    """
    if schedule is None or not is_current(schedule, firing):
        return Dispatch(Action.SUPERSEDED)
    # Time held on purpose (the tenant was sidelined) does not count as lateness.
    late_by = now_ms - held_ms - firing.fire_at_ms
    action = Action.EXPIRE if late_by > schedule.spec.effective_relevancy_ms else Action.DELIVER
    if firing.attempt != 1 or firing.redrive or is_triggered(firing):
        return Dispatch(action)
    nxt = next_occurrence(schedule, firing, now_ms)
    next_firing = None
    if nxt is not None:
        next_firing = occurrence_firing(schedule, nxt[0], nxt[1], now_ms)
    progress = Progress(
        next_fire_ms=next_firing.fire_at_ms if next_firing else None,
        last_fire_ms=now_ms,
        last_outcome=schedule.last_outcome,
        fired_count=schedule.fired_count + 1,
        failures_in_row=schedule.failures_in_row,
    )
    return Dispatch(action, next_firing, progress, completes=next_firing is None)


def missed_before(
    schedule: Schedule, firing: Firing, next_firing: Firing | None, now_ms: int
) -> tuple[Execution, int] | None:
    """The record of the occurrences between `firing`'s and `next_firing`'s that the
    misfire policy left out (they fell due while no worker fired them), and how many
    they were; None when there were none."""
    if next_firing is None or firing.attempt != 1 or firing.redrive or is_triggered(firing):
        return None
    trigger = effective_trigger(schedule)
    first = triggers.occurrence(trigger, firing.seq + 1, firing.occurrence_ms)
    if first is None or first >= next_firing.occurrence_ms:
        return None
    count, seq, time, last = 0, firing.seq + 1, first, first
    while time < next_firing.occurrence_ms and count < _CATCH_UP_MAX_STEPS:
        count, last = count + 1, time
        following = triggers.occurrence(trigger, seq + 1, time)
        if following is None:
            break
        seq, time = seq + 1, following
    shown = f"{count}" if count < _CATCH_UP_MAX_STEPS else f"at least {count}"
    reason = (
        f"{shown} occurrence{'' if count == 1 else 's'} from {triggers.describe_time(first)} "
        f"to {triggers.describe_time(last)} missed (misfire {schedule.spec.misfire.name})"
    )
    first_firing = make_firing(schedule, firing.seq + 1, first, 1, now_ms)
    return skipped(first_firing, now_ms, reason), count


def failures_in_row(previous: int, outcome: Outcome) -> int:
    """The count of occurrences in a row that failed for good, after one with this
    outcome (retrying and expired ones leave it as it was)."""
    if outcome is Outcome.FAILED:
        return previous + 1
    if outcome is Outcome.SUCCEEDED:
        return 0
    return previous


def paused_for_failures(
    schedule: Schedule, failures: int, execution: Execution, now_ms: int
) -> Schedule | None:
    """The schedule paused by its `pause_after_failures` opt-in, with a note saying
    why; None when it stays as it is."""
    limit = schedule.spec.pause_after_failures
    if (
        not limit
        or failures < limit
        or execution.outcome is not Outcome.FAILED
        or schedule.state is not ScheduleState.ACTIVE
    ):
        return None
    note = (
        f"paused by Clockwork after {failures} occurrences in a row failed "
        f"(pause_after_failures {limit}); the last: {execution.error[:200]}"
    )
    return dataclasses.replace(
        schedule,
        state=ScheduleState.PAUSED,
        version=schedule.version + 1,
        updated_ms=now_ms,
        next_fire_ms=None,
        note=note,
    )


def next_occurrence(schedule: Schedule, firing: Firing, now_ms: int) -> tuple[int, int] | None:
    """(seq, time) of the occurrence after `firing`'s, applying the misfire policy."""
    trigger = effective_trigger(schedule)
    candidate = triggers.occurrence(trigger, firing.seq + 1, firing.occurrence_ms)
    if candidate is None or candidate >= now_ms:
        return None if candidate is None else (firing.seq + 1, candidate)
    # Missed (the worker is behind after an outage): never a storm of catch-ups.
    if schedule.spec.misfire is MisfirePolicy.SKIP:
        return triggers.first_at_or_after(trigger, now_ms)
    return _latest_at_or_before(trigger, firing.seq + 1, candidate, now_ms)


def _latest_at_or_before(
    trigger: triggers.Trigger, seq: int, occurrence_ms: int, now_ms: int
) -> tuple[int, int]:
    jump = triggers.first_at_or_after(trigger, now_ms - _CATCH_UP_JUMP_MS)
    if jump is not None and occurrence_ms < jump[1] <= now_ms:
        seq, occurrence_ms = jump
    for _ in range(_CATCH_UP_MAX_STEPS):
        following = triggers.occurrence(trigger, seq + 1, occurrence_ms)
        if following is None or following > now_ms:
            break
        seq, occurrence_ms = seq + 1, following
    return seq, occurrence_ms


@dataclass(frozen=True, slots=True)
class Settled:
    execution: Execution
    retry: Firing | None


def _retry_at(
    schedule: Schedule, firing: Firing, result: DeliveryResult, finished_ms: int, rnd: float
) -> int | None:
    """When the next attempt is due, or None if there is none (permanent failure,
    attempts exhausted, or the retry would come later than the policy's max age)."""
    policy = schedule.spec.retry
    if result.ok or not result.retryable or firing.attempt >= retry.attempts_allowed(policy):
        return None
    delay = retry.retry_delay_ms(policy, firing.attempt, rnd)
    if result.retry_after_ms is not None:
        delay = max(delay, result.retry_after_ms)
    at = finished_ms + delay
    if policy.max_age_ms and at - firing.occurrence_ms > policy.max_age_ms:
        return None
    return at


def settle(
    schedule: Schedule,
    firing: Firing,
    result: DeliveryResult,
    started_ms: int,
    finished_ms: int,
    rnd: float,
    capture_bytes: int = DEFAULT_RESPONSE_CAPTURE_BYTES,
) -> Settled:
    """Turn a delivery result into an execution record (keeping `capture_bytes` of
    the response body) and, if due, a retry firing."""
    retry_firing = None
    error = result.error
    retry_at = _retry_at(schedule, firing, result, finished_ms, rnd)
    if result.ok:
        outcome = Outcome.SUCCEEDED
    elif retry_at is None:
        outcome = Outcome.FAILED
        policy = schedule.spec.retry
        if result.retryable and firing.attempt < retry.attempts_allowed(policy):
            error = f"{error} (retry max age of {policy.max_age_ms} ms reached)"
    else:
        retry_firing = make_firing(
            schedule,
            firing.seq,
            firing.occurrence_ms,
            firing.attempt + 1,
            retry_at,
            firing.redrive,
            firing.payload,
        )
        outcome = Outcome.RETRYING
    execution = Execution(
        tenant=firing.tenant,
        schedule_key=firing.schedule_key,
        firing_id=firing.firing_id,
        delivery_id=firing.delivery_id,
        attempt=firing.attempt,
        occurrence_ms=firing.occurrence_ms,
        due_ms=firing.fire_at_ms,
        started_ms=started_ms,
        duration_ms=max(0, finished_ms - started_ms),
        outcome=outcome,
        status_code=result.status_code,
        error=error[:1024],
        next_attempt_ms=retry_firing.fire_at_ms if retry_firing else None,
        response_body=result.response_body[:capture_bytes],
        response_headers=tuple(sorted(result.response_headers)),
    )
    return Settled(execution, retry_firing)


def expired(firing: Firing, now_ms: int) -> Execution:
    return Execution(
        tenant=firing.tenant,
        schedule_key=firing.schedule_key,
        firing_id=firing.firing_id,
        delivery_id=firing.delivery_id,
        attempt=firing.attempt,
        occurrence_ms=firing.occurrence_ms,
        due_ms=firing.fire_at_ms,
        started_ms=now_ms,
        duration_ms=0,
        outcome=Outcome.EXPIRED,
        error=f"past the relevancy window (late by {now_ms - firing.fire_at_ms} ms)",
    )


def dead_letter(firing: Firing, execution: Execution) -> DeadLetter:
    """The dead-letter record of a firing that failed for good."""
    return DeadLetter(
        tenant=firing.tenant,
        schedule_key=firing.schedule_key,
        schedule_id=firing.schedule_id,
        firing_id=firing.firing_id,
        delivery_id=firing.delivery_id,
        shard=firing.shard,
        seq=firing.seq,
        occurrence_ms=firing.occurrence_ms,
        attempts=firing.attempt,
        dead_ms=execution.started_ms + execution.duration_ms,
        last_status=execution.status_code,
        last_error=execution.error,
        payload=firing.payload,
    )


def redrive_firing(schedule: Schedule, letter: DeadLetter, now_ms: int) -> Firing:
    """A fresh first attempt of a dead letter's occurrence, due now, with the same
    delivery id (receivers deduplicate) and a new firing id (its generation is the
    redrive time, so redriving the same letter twice makes two distinct firings)."""
    return make_firing(
        schedule,
        letter.seq,
        letter.occurrence_ms,
        1,
        now_ms,
        redrive=now_ms,
        payload=letter.payload,
    )
