"""Conversions between the v1 protobuf messages and the domain objects (and the API's
own types in clockwork_svc/api/v1/model.py), in both directions.

The servicers use them to read requests and write replies, the client to write
requests and read replies, so a reply the client reads back converts to the message
the server sent. Field paths in errors use the proto field names. Generated code
(`*_pb2*`) lives beside this module; scripts/gen_proto.py writes only those files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.protobuf import duration_pb2, timestamp_pb2

from clockwork_svc.api.status import code_of, error_of, status_of
from clockwork_svc.api.v1 import cluster_pb2, tenants_pb2
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1.model import (
    DeadLetterInfo,
    DeadLetterRange,
    Page,
    SecretRotated,
    TenantCreated,
    TenantInfo,
    TokenIssued,
)
from clockwork_svc.domain import labels as label_rules
from clockwork_svc.domain import triggers
from clockwork_svc.domain.labels import Labels
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision, WorkerLoad
from clockwork_svc.domain.model import (
    DEFAULT_RESPONSE_CAPTURE_BYTES,
    Backfilled,
    BulkAction,
    BulkResult,
    Created,
    DeadLetter,
    Execution,
    Outcome,
    RedriveResult,
    Schedule,
    ScheduleDetail,
    ScheduleQuery,
    ScheduleState,
    Triggered,
)
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    MisfirePolicy,
    OverlapPolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    Target,
    validate_key,
)
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.errors import ClockworkError, InvalidArgument

_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

_RETRY_KINDS = {
    pb.RetryPolicy.KIND_UNSPECIFIED: RetryKind.DEFAULT,
    pb.RetryPolicy.NONE: RetryKind.NONE,
    pb.RetryPolicy.FIXED: RetryKind.FIXED,
    pb.RetryPolicy.EXPONENTIAL: RetryKind.EXPONENTIAL,
}
_RETRY_KINDS_PB = {v: k for k, v in _RETRY_KINDS.items()}
_MISFIRE = {
    pb.MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy.FIRE_LATEST,
    pb.FIRE_LATEST: MisfirePolicy.FIRE_LATEST,
    pb.SKIP: MisfirePolicy.SKIP,
}
_MISFIRE_PB = {MisfirePolicy.FIRE_LATEST: pb.FIRE_LATEST, MisfirePolicy.SKIP: pb.SKIP}
_STATES = {
    ScheduleState.ACTIVE: pb.ACTIVE,
    ScheduleState.PAUSED: pb.PAUSED,
    ScheduleState.CANCELLED: pb.CANCELLED,
    ScheduleState.COMPLETED: pb.COMPLETED,
}
_OUTCOMES = {
    Outcome.SUCCEEDED: pb.SUCCEEDED,
    Outcome.RETRYING: pb.RETRYING,
    Outcome.FAILED: pb.FAILED,
    Outcome.EXPIRED: pb.EXPIRED,
    Outcome.SKIPPED: pb.SKIPPED,
}
_OVERLAP = {
    pb.OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy.ALLOW_ALL,
    pb.ALLOW_ALL: OverlapPolicy.ALLOW_ALL,
    pb.SKIP_OVERLAP: OverlapPolicy.SKIP,
    pb.BUFFER_ONE: OverlapPolicy.BUFFER_ONE,
}
_OVERLAP_PB = {
    OverlapPolicy.ALLOW_ALL: pb.ALLOW_ALL,
    OverlapPolicy.SKIP: pb.SKIP_OVERLAP,
    OverlapPolicy.BUFFER_ONE: pb.BUFFER_ONE,
}
_STATES_PB = {v: k for k, v in _STATES.items()}
_OUTCOMES_PB = {v: k for k, v in _OUTCOMES.items()}


def ts_to_ms(ts: timestamp_pb2.Timestamp, field: str) -> int:
    if not 0 <= ts.nanos < 1_000_000_000:
        raise InvalidArgument(field, "nanos out of range")
    ms = ts.seconds * 1000 + ts.nanos // 1_000_000
    if not 0 <= ms <= _MAX_MS:
        raise InvalidArgument(field, "must be between 1970 and 9999")
    return ms


def ms_to_ts(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def dur_to_ms(d: duration_pb2.Duration, field: str) -> int:
    if d.seconds < 0 or d.nanos < 0:
        raise InvalidArgument(field, "must not be negative")
    if d.seconds > 10 * 365 * 86_400:
        raise InvalidArgument(field, "is too long")
    return d.seconds * 1000 + d.nanos // 1_000_000


def ms_to_dur(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _opt_ts(msg: object, name: str, field: str) -> int | None:
    if not msg.HasField(name):  # type: ignore[attr-defined]
        return None
    return ts_to_ms(getattr(msg, name), field)


def _set_opt_ts(msg: object, name: str, ms: int | None) -> None:
    if ms is not None:
        getattr(msg, name).CopyFrom(ms_to_ts(ms))


def retry_from_pb(retry: pb.RetryPolicy, prefix: str) -> RetryPolicy:
    if retry.kind not in _RETRY_KINDS:
        raise InvalidArgument(f"{prefix}.kind", "unknown retry kind")
    return RetryPolicy(
        kind=_RETRY_KINDS[retry.kind],
        max_attempts=retry.max_attempts,
        initial_delay_ms=dur_to_ms(retry.initial_delay, f"{prefix}.initial_delay"),
        max_delay_ms=dur_to_ms(retry.max_delay, f"{prefix}.max_delay"),
        multiplier=retry.multiplier,
        max_age_ms=dur_to_ms(retry.max_age, f"{prefix}.max_age"),
    )


def retry_to_pb(r: RetryPolicy) -> pb.RetryPolicy:
    out = pb.RetryPolicy(
        kind=_RETRY_KINDS_PB[r.kind], max_attempts=r.max_attempts, multiplier=r.multiplier
    )
    if r.max_age_ms:
        out.max_age.CopyFrom(ms_to_dur(r.max_age_ms))
    if r.initial_delay_ms:
        out.initial_delay.CopyFrom(ms_to_dur(r.initial_delay_ms))
    if r.max_delay_ms:
        out.max_delay.CopyFrom(ms_to_dur(r.max_delay_ms))
    return out


def trigger_from_pb(
    msg: pb.ScheduleSpec | pb.PreviewScheduleRequest, prefix: str
) -> triggers.Trigger:
    """The trigger of a message with the `trigger` oneof (once, interval, cron);
    `prefix` ("spec", or "" for a preview) leads the field paths of errors."""
    lead = f"{prefix}." if prefix else ""
    kind = msg.WhichOneof("trigger")
    if kind == "once":
        if not msg.once.HasField("at"):
            raise InvalidArgument(f"{lead}once.at", "is required")
        return triggers.OnceTrigger(ts_to_ms(msg.once.at, f"{lead}once.at"))
    if kind == "interval":
        iv = msg.interval
        return triggers.IntervalTrigger(
            every_ms=dur_to_ms(iv.every, f"{lead}interval.every"),
            start_ms=_opt_ts(iv, "start", f"{lead}interval.start"),
            end_ms=_opt_ts(iv, "end", f"{lead}interval.end"),
            count=iv.count or None,
        )
    if kind == "cron":
        cr = msg.cron
        return triggers.CronTrigger(
            expression=cr.expression,
            timezone=cr.timezone or "UTC",
            start_ms=_opt_ts(cr, "start", f"{lead}cron.start"),
            end_ms=_opt_ts(cr, "end", f"{lead}cron.end"),
            count=cr.count or None,
        )
    raise InvalidArgument(f"{lead}trigger", "one of once, interval or cron is required")


def trigger_to_pb(t: triggers.Trigger, out: pb.ScheduleSpec | pb.PreviewScheduleRequest) -> None:
    """Sets the `trigger` oneof of `out`."""
    if isinstance(t, triggers.OnceTrigger):
        out.once.at.CopyFrom(ms_to_ts(t.at_ms))
    elif isinstance(t, triggers.IntervalTrigger):
        out.interval.every.CopyFrom(ms_to_dur(t.every_ms))
        _set_window(out.interval, t.start_ms, t.end_ms, t.count)
    else:
        out.cron.expression = t.expression
        out.cron.timezone = t.timezone
        _set_window(out.cron, t.start_ms, t.end_ms, t.count)


def spec_from_pb(spec: pb.ScheduleSpec, prefix: str = "spec") -> ScheduleSpec:
    trigger = trigger_from_pb(spec, prefix)
    target = _target_from_pb(spec, prefix)
    retry = retry_from_pb(spec.retry, f"{prefix}.retry")
    if spec.misfire not in _MISFIRE:
        raise InvalidArgument(f"{prefix}.misfire", "unknown misfire policy")
    if spec.overlap not in _OVERLAP:
        raise InvalidArgument(f"{prefix}.overlap", "unknown overlap policy")
    return ScheduleSpec(
        trigger=trigger,
        target=target,
        payload=spec.payload,
        retry=retry,
        relevancy_window_ms=dur_to_ms(spec.relevancy_window, f"{prefix}.relevancy_window"),
        jitter_ms=dur_to_ms(spec.jitter, f"{prefix}.jitter"),
        ordering_key=spec.ordering_key,
        misfire=_MISFIRE[spec.misfire],
        pause_after_failures=spec.pause_after_failures,
        overlap=_OVERLAP[spec.overlap],
    )


def _target_from_pb(spec: pb.ScheduleSpec, prefix: str) -> Target:
    kind = spec.WhichOneof("target")
    if kind == "kafka":
        return KafkaTarget(
            topic=spec.kafka.topic, headers=tuple(sorted(spec.kafka.headers.items()))
        )
    if kind != "http":
        raise InvalidArgument(f"{prefix}.http", "a target (http or kafka) is required")
    http = spec.http
    return HttpTarget(
        url=http.url,
        method=(http.method or "POST").upper(),
        headers=tuple(sorted(http.headers.items())),
        timeout_ms=dur_to_ms(http.timeout, f"{prefix}.http.timeout"),
    )


def spec_to_pb(spec: ScheduleSpec) -> pb.ScheduleSpec:
    out = pb.ScheduleSpec(
        payload=spec.payload,
        ordering_key=spec.ordering_key,
        misfire=_MISFIRE_PB[spec.misfire],
        pause_after_failures=spec.pause_after_failures,
        overlap=_OVERLAP_PB[spec.overlap],
    )
    trigger_to_pb(spec.trigger, out)
    if isinstance(spec.target, KafkaTarget):
        out.kafka.topic = spec.target.topic
        out.kafka.headers.update(dict(spec.target.headers))
    else:
        out.http.url = spec.target.url
        out.http.method = spec.target.method
        out.http.headers.update(dict(spec.target.headers))
        if spec.target.timeout_ms:
            out.http.timeout.CopyFrom(ms_to_dur(spec.target.timeout_ms))
    out.retry.CopyFrom(retry_to_pb(spec.retry))
    if spec.relevancy_window_ms:
        out.relevancy_window.CopyFrom(ms_to_dur(spec.relevancy_window_ms))
    if spec.jitter_ms:
        out.jitter.CopyFrom(ms_to_dur(spec.jitter_ms))
    return out


def _set_window(
    msg: pb.IntervalTrigger | pb.CronTrigger, start: int | None, end: int | None, count: int | None
) -> None:
    if start is not None:
        msg.start.CopyFrom(ms_to_ts(start))
    if end is not None:
        msg.end.CopyFrom(ms_to_ts(end))
    msg.count = count or 0


# --- schedules ------------------------------------------------------------------------


def schedule_to_pb(s: Schedule) -> pb.Schedule:
    out = pb.Schedule(
        tenant=s.tenant,
        key=s.key,
        id=s.id,
        spec=spec_to_pb(s.spec),
        state=_STATES[s.state],
        version=s.version,
        create_time=ms_to_ts(s.created_ms),
        update_time=ms_to_ts(s.updated_ms),
        fired_count=s.fired_count,
        shard=s.shard,
        last_outcome=_OUTCOMES[s.last_outcome] if s.last_outcome else pb.OUTCOME_UNSPECIFIED,
        pause_note=s.note,
        failures_in_row=s.failures_in_row,
        labels=dict(s.labels),
    )
    if s.next_fire_ms is not None and s.state is ScheduleState.ACTIVE:
        out.next_fire_time.CopyFrom(ms_to_ts(s.next_fire_ms))
    if s.last_fire_ms is not None:
        out.last_fire_time.CopyFrom(ms_to_ts(s.last_fire_ms))
    return out


def schedule_from_pb(s: pb.Schedule) -> Schedule:
    """The schedule the server sent (its next fire time only while it is active)."""
    if s.state not in _STATES_PB:
        raise InvalidArgument("schedule.state", "unknown schedule state")
    return Schedule(
        tenant=s.tenant,
        key=s.key,
        id=s.id,
        spec=spec_from_pb(s.spec, "schedule.spec"),
        state=_STATES_PB[s.state],
        version=s.version,
        created_ms=ts_to_ms(s.create_time, "schedule.create_time"),
        updated_ms=ts_to_ms(s.update_time, "schedule.update_time"),
        shard=s.shard,
        next_fire_ms=_opt_ts(s, "next_fire_time", "schedule.next_fire_time"),
        last_fire_ms=_opt_ts(s, "last_fire_time", "schedule.last_fire_time"),
        last_outcome=_outcome_from_pb(s.last_outcome, "schedule.last_outcome"),
        fired_count=s.fired_count,
        note=s.pause_note,
        failures_in_row=s.failures_in_row,
        labels=tuple(sorted(s.labels.items())),
    )


def labels_from_pb(labels: Mapping[str, str], field: str) -> Labels:
    return label_rules.normalize(labels, field)


def query_from_pb(
    request: pb.ListSchedulesRequest | pb.BulkScheduleActionRequest,
) -> ScheduleQuery | None:
    """The listing's filter; None when it has none (a plain listing)."""
    if not (request.key_prefix or request.states or request.label_selector):
        return None
    states = set()
    for i, state in enumerate(request.states):
        if state not in _STATES_PB:
            raise InvalidArgument(f"states[{i}]", "unknown schedule state")
        states.add(_STATES_PB[state])
    selector = None
    if request.label_selector:
        selector = label_rules.parse_selector(request.label_selector, "label_selector")
    if request.key_prefix:
        validate_key(request.key_prefix, "key_prefix")
    return ScheduleQuery(request.key_prefix, frozenset(states), selector)


def query_to_pb(
    query: ScheduleQuery, out: pb.ListSchedulesRequest | pb.BulkScheduleActionRequest
) -> None:
    out.key_prefix = query.prefix
    out.states.extend(sorted(_STATES[s] for s in query.states))
    if query.selector is not None:
        out.label_selector = query.selector.text


_BULK_ACTIONS = {
    pb.BULK_PAUSE: BulkAction.PAUSE,
    pb.BULK_RESUME: BulkAction.RESUME,
    pb.BULK_CANCEL: BulkAction.CANCEL,
    pb.BULK_TRIGGER: BulkAction.TRIGGER,
}
_BULK_ACTIONS_PB = {v: k for k, v in _BULK_ACTIONS.items()}


def bulk_action_from_pb(action: pb.BulkAction.ValueType) -> BulkAction:
    if action not in _BULK_ACTIONS:
        raise InvalidArgument("action", "one of BULK_PAUSE, BULK_RESUME, BULK_CANCEL, BULK_TRIGGER")
    return _BULK_ACTIONS[action]


def bulk_action_to_pb(action: BulkAction) -> pb.BulkAction.ValueType:
    return _BULK_ACTIONS_PB[action]


def bulk_result_to_pb(r: BulkResult, next_page_token: str) -> pb.BulkScheduleActionResponse:
    return pb.BulkScheduleActionResponse(
        matched=r.matched,
        applied=r.applied,
        skipped=r.skipped,
        failed=r.failed,
        first_keys=r.first_keys,
        failures=[pb.BulkFailure(key=k, message=m) for k, m in r.failures],
        next_page_token=next_page_token,
    )


def bulk_result_from_pb(r: pb.BulkScheduleActionResponse) -> tuple[BulkResult, str]:
    """The result, and the token of the next call ("" after the last)."""
    result = BulkResult(
        r.matched,
        r.applied,
        r.skipped,
        r.failed,
        tuple(r.first_keys),
        tuple((f.key, f.message) for f in r.failures),
    )
    return result, r.next_page_token


def detail_to_pb(d: ScheduleDetail) -> pb.Schedule:
    out = schedule_to_pb(d.schedule)
    out.upcoming_fire_times.extend(ms_to_ts(ms) for ms in d.upcoming_ms)
    out.recent_executions.extend(execution_to_pb(e) for e in d.recent)
    return out


def detail_from_pb(s: pb.Schedule) -> ScheduleDetail:
    return ScheduleDetail(
        schedule_from_pb(s),
        tuple(
            ts_to_ms(t, f"schedule.upcoming_fire_times[{i}]")
            for i, t in enumerate(s.upcoming_fire_times)
        ),
        tuple(execution_from_pb(e, s.tenant, s.key) for e in s.recent_executions),
    )


def preview_to_pb(times: Sequence[int], description: str) -> pb.PreviewScheduleResponse:
    return pb.PreviewScheduleResponse(
        fire_times=[ms_to_ts(ms) for ms in times], description=description
    )


def preview_from_pb(reply: pb.PreviewScheduleResponse) -> list[int]:
    return [ts_to_ms(t, f"fire_times[{i}]") for i, t in enumerate(reply.fire_times)]


def triggered_to_pb(t: Triggered) -> pb.TriggerScheduleResponse:
    return pb.TriggerScheduleResponse(
        delivery_id=t.delivery_id,
        firing_id=t.firing_id,
        due_time=ms_to_ts(t.due_ms),
        triggered=t.triggered,
    )


def triggered_from_pb(t: pb.TriggerScheduleResponse) -> Triggered:
    return Triggered(t.delivery_id, t.firing_id, ts_to_ms(t.due_time, "due_time"), t.triggered)


def backfill_range_from_pb(request: pb.BackfillScheduleRequest) -> tuple[int, int]:
    for field in ("start", "end"):
        if not request.HasField(field):
            raise InvalidArgument(field, "is required")
    return ts_to_ms(request.start, "start"), ts_to_ms(request.end, "end")


def backfilled_to_pb(b: Backfilled) -> pb.BackfillScheduleResponse:
    out = pb.BackfillScheduleResponse(count=b.count)
    _set_opt_ts(out, "first_occurrence_time", b.first_ms)
    _set_opt_ts(out, "last_occurrence_time", b.last_ms)
    return out


def backfilled_from_pb(b: pb.BackfillScheduleResponse) -> Backfilled:
    return Backfilled(
        b.count,
        _opt_ts(b, "first_occurrence_time", "first_occurrence_time"),
        _opt_ts(b, "last_occurrence_time", "last_occurrence_time"),
    )


def _outcome_from_pb(outcome: pb.Outcome.ValueType, field: str) -> Outcome | None:
    if outcome == pb.OUTCOME_UNSPECIFIED:
        return None
    if outcome not in _OUTCOMES_PB:
        raise InvalidArgument(field, "unknown outcome")
    return _OUTCOMES_PB[outcome]


def created_to_pb(c: Created) -> pb.CreateScheduleResponse:
    return pb.CreateScheduleResponse(schedule=schedule_to_pb(c.schedule), created=c.created)


def created_from_pb(c: pb.CreateScheduleResponse) -> Created:
    return Created(schedule_from_pb(c.schedule), c.created)


def batch_to_pb(outcomes: Sequence[Created | ClockworkError]) -> pb.BatchCreateSchedulesResponse:
    """Each entry's answer: the created schedule, or its error's status and message."""
    results = [
        pb.BatchCreateResult(code=0, response=created_to_pb(outcome))
        if isinstance(outcome, Created)
        else pb.BatchCreateResult(code=status_of(outcome).value[0], message=str(outcome))
        for outcome in outcomes
    ]
    return pb.BatchCreateSchedulesResponse(results=results)


def batch_from_pb(reply: pb.BatchCreateSchedulesResponse) -> list[Created | ClockworkError]:
    """Each entry's answer, in request order: `Created`, or the error its status stands
    for (not raised: the other entries went through)."""
    return [
        created_from_pb(r.response) if r.code == 0 else error_of(code_of(r.code), r.message)
        for r in reply.results
    ]


def schedule_page_to_pb(page: Page[Schedule]) -> pb.ListSchedulesResponse:
    return pb.ListSchedulesResponse(
        schedules=[schedule_to_pb(s) for s in page.items], next_page_token=page.next_page_token
    )


def schedule_page_from_pb(reply: pb.ListSchedulesResponse) -> Page[Schedule]:
    return Page(tuple(schedule_from_pb(s) for s in reply.schedules), reply.next_page_token)


# --- executions and dead letters -----------------------------------------------------


def execution_to_pb(e: Execution) -> pb.Execution:
    out = pb.Execution(
        firing_id=e.firing_id,
        delivery_id=e.delivery_id,
        attempt=e.attempt,
        occurrence_time=ms_to_ts(e.occurrence_ms),
        due_time=ms_to_ts(e.due_ms),
        start_time=ms_to_ts(e.started_ms),
        duration=ms_to_dur(e.duration_ms),
        outcome=_OUTCOMES[e.outcome],
        status_code=e.status_code,
        error=e.error,
        response_body=e.response_body,
        response_headers=dict(e.response_headers),
    )
    if e.next_attempt_ms is not None:
        out.next_attempt_time.CopyFrom(ms_to_ts(e.next_attempt_ms))
    return out


def execution_from_pb(e: pb.Execution, tenant: str, key: str) -> Execution:
    """An execution of schedule `key` of `tenant` (the message carries neither: the
    request names them)."""
    outcome = _outcome_from_pb(e.outcome, "execution.outcome")
    if outcome is None:
        raise InvalidArgument("execution.outcome", "is required")
    return Execution(
        tenant=tenant,
        schedule_key=key,
        firing_id=e.firing_id,
        delivery_id=e.delivery_id,
        attempt=e.attempt,
        occurrence_ms=ts_to_ms(e.occurrence_time, "execution.occurrence_time"),
        due_ms=ts_to_ms(e.due_time, "execution.due_time"),
        started_ms=ts_to_ms(e.start_time, "execution.start_time"),
        duration_ms=dur_to_ms(e.duration, "execution.duration"),
        outcome=outcome,
        status_code=e.status_code,
        error=e.error,
        next_attempt_ms=_opt_ts(e, "next_attempt_time", "execution.next_attempt_time"),
        response_body=e.response_body,
        response_headers=tuple(sorted(e.response_headers.items())),
    )


def execution_page_to_pb(page: Page[Execution]) -> pb.ListExecutionsResponse:
    return pb.ListExecutionsResponse(
        executions=[execution_to_pb(e) for e in page.items], next_page_token=page.next_page_token
    )


def execution_page_from_pb(
    reply: pb.ListExecutionsResponse, tenant: str, key: str
) -> Page[Execution]:
    executions = tuple(execution_from_pb(e, tenant, key) for e in reply.executions)
    return Page(executions, reply.next_page_token)


def dead_letter_to_pb(d: DeadLetter | DeadLetterInfo) -> pb.DeadLetter:
    out = pb.DeadLetter(
        key=d.schedule_key,
        firing_id=d.firing_id,
        delivery_id=d.delivery_id,
        occurrence_time=ms_to_ts(d.occurrence_ms),
        attempts=d.attempts,
        dead_time=ms_to_ts(d.dead_ms),
        last_status_code=d.last_status,
        last_error=d.last_error,
    )
    if d.redriven_ms is not None:
        out.redrive_time.CopyFrom(ms_to_ts(d.redriven_ms))
    return out


def dead_letter_from_pb(d: pb.DeadLetter) -> DeadLetterInfo:
    return DeadLetterInfo(
        schedule_key=d.key,
        firing_id=d.firing_id,
        delivery_id=d.delivery_id,
        occurrence_ms=ts_to_ms(d.occurrence_time, "dead_letter.occurrence_time"),
        attempts=d.attempts,
        dead_ms=ts_to_ms(d.dead_time, "dead_letter.dead_time"),
        last_status=d.last_status_code,
        last_error=d.last_error,
        redriven_ms=_opt_ts(d, "redrive_time", "dead_letter.redrive_time"),
    )


def dead_letter_page_to_pb(
    page: Page[DeadLetter] | Page[DeadLetterInfo],
) -> pb.ListDeadLettersResponse:
    return pb.ListDeadLettersResponse(
        dead_letters=[dead_letter_to_pb(d) for d in page.items],
        next_page_token=page.next_page_token,
    )


def dead_letter_page_from_pb(reply: pb.ListDeadLettersResponse) -> Page[DeadLetterInfo]:
    return Page(tuple(dead_letter_from_pb(d) for d in reply.dead_letters), reply.next_page_token)


def range_to_pb(window: DeadLetterRange) -> pb.DeadLetterRange:
    out = pb.DeadLetterRange(key=window.key)
    _set_opt_ts(out, "since", window.since_ms)
    _set_opt_ts(out, "until", window.until_ms)
    return out


def range_from_pb(window: pb.DeadLetterRange) -> DeadLetterRange:
    return DeadLetterRange(
        since_ms=_opt_ts(window, "since", "range.since"),
        until_ms=_opt_ts(window, "until", "range.until"),
        key=window.key,
    )


def redrive_to_pb(r: RedriveResult) -> pb.RedriveDeadLettersResponse:
    return pb.RedriveDeadLettersResponse(redriven=r.redriven, skipped=r.skipped)


def redrive_from_pb(r: pb.RedriveDeadLettersResponse) -> RedriveResult:
    return RedriveResult(redriven=r.redriven, skipped=r.skipped)


# --- tenants ---------------------------------------------------------------------------


def limits_to_pb(limits: TenantLimits) -> tenants_pb2.TenantLimits:
    """The limits (without `paused`: the API sets that with PauseTenant/ResumeTenant)."""
    return tenants_pb2.TenantLimits(
        rate_per_s=limits.rate_per_s,
        burst=limits.burst,
        max_concurrency=limits.max_concurrency,
        drain_rate_per_s=limits.drain_rate_per_s,
    )


def limits_from_pb(limits: tenants_pb2.TenantLimits, paused: bool = False) -> TenantLimits:
    return TenantLimits(
        rate_per_s=limits.rate_per_s,
        burst=limits.burst,
        max_concurrency=limits.max_concurrency,
        paused=paused,
        drain_rate_per_s=limits.drain_rate_per_s,
    )


def defaults_to_pb(defaults: TenantDefaults) -> tenants_pb2.TenantDefaults:
    out = tenants_pb2.TenantDefaults(
        retry=retry_to_pb(defaults.retry), response_capture_bytes=defaults.response_capture_bytes
    )
    if defaults.relevancy_window_ms:
        out.relevancy_window.CopyFrom(ms_to_dur(defaults.relevancy_window_ms))
    return out


def defaults_from_pb(
    defaults: tenants_pb2.TenantDefaults, prefix: str = "defaults"
) -> TenantDefaults:
    capture = DEFAULT_RESPONSE_CAPTURE_BYTES
    if defaults.HasField("response_capture_bytes"):
        capture = defaults.response_capture_bytes
    return TenantDefaults(
        retry=retry_from_pb(defaults.retry, f"{prefix}.retry"),
        relevancy_window_ms=dur_to_ms(defaults.relevancy_window, f"{prefix}.relevancy_window"),
        response_capture_bytes=capture,
    )


def tenant_to_pb(t: TenantInfo) -> tenants_pb2.Tenant:
    return tenants_pb2.Tenant(
        defaults=defaults_to_pb(t.defaults),
        limits=limits_to_pb(t.limits),
        paused=t.limits.paused,
        name=t.name,
        create_time=ms_to_ts(t.created_ms),
        update_time=ms_to_ts(t.updated_ms),
        version=t.version,
        signing_secret_count=t.signing_secret_count,
        token_count=t.token_count,
    )


def tenant_from_pb(t: tenants_pb2.Tenant) -> TenantInfo:
    return TenantInfo(
        name=t.name,
        created_ms=ts_to_ms(t.create_time, "tenant.create_time"),
        updated_ms=ts_to_ms(t.update_time, "tenant.update_time"),
        version=t.version,
        signing_secret_count=t.signing_secret_count,
        token_count=t.token_count,
        limits=limits_from_pb(t.limits, t.paused),
        defaults=defaults_from_pb(t.defaults, "tenant.defaults"),
    )


def tenant_page_to_pb(page: Page[TenantInfo]) -> tenants_pb2.ListTenantsResponse:
    return tenants_pb2.ListTenantsResponse(
        tenants=[tenant_to_pb(t) for t in page.items], next_page_token=page.next_page_token
    )


def tenant_page_from_pb(reply: tenants_pb2.ListTenantsResponse) -> Page[TenantInfo]:
    return Page(tuple(tenant_from_pb(t) for t in reply.tenants), reply.next_page_token)


def tenant_created_to_pb(c: TenantCreated) -> tenants_pb2.CreateTenantResponse:
    return tenants_pb2.CreateTenantResponse(
        tenant=tenant_to_pb(c.tenant), token=c.token, signing_secret=c.signing_secret
    )


def tenant_created_from_pb(c: tenants_pb2.CreateTenantResponse) -> TenantCreated:
    return TenantCreated(tenant_from_pb(c.tenant), c.token, c.signing_secret)


def secret_rotated_to_pb(r: SecretRotated) -> tenants_pb2.RotateSigningSecretResponse:
    return tenants_pb2.RotateSigningSecretResponse(
        tenant=tenant_to_pb(r.tenant), signing_secret=r.signing_secret
    )


def secret_rotated_from_pb(r: tenants_pb2.RotateSigningSecretResponse) -> SecretRotated:
    return SecretRotated(tenant_from_pb(r.tenant), r.signing_secret)


def token_issued_to_pb(i: TokenIssued) -> tenants_pb2.IssueTokenResponse:
    return tenants_pb2.IssueTokenResponse(tenant=tenant_to_pb(i.tenant), token=i.token)


def token_issued_from_pb(i: tenants_pb2.IssueTokenResponse) -> TokenIssued:
    return TokenIssued(tenant_from_pb(i.tenant), i.token)


# --- cluster load ------------------------------------------------------------------------


def cluster_load_to_pb(load: ClusterLoad) -> cluster_pb2.ClusterLoad:
    return cluster_pb2.ClusterLoad(
        workers=[
            cluster_pb2.WorkerLoad(
                worker_id=w.worker_id,
                shards=w.shards,
                due_per_second=w.due_per_s,
                overdue=w.overdue,
                dispatch_per_second=w.dispatch_per_s,
                lag_p50_ms=w.lag_p50_ms,
                lag_p99_ms=w.lag_p99_ms,
                in_flight=w.in_flight,
                window_seconds=w.window_s,
                report_time=ms_to_ts(w.report_ms),
            )
            for w in sorted(load.workers, key=lambda w: w.worker_id)
        ],
        due_per_second=load.due_per_s,
        dispatch_per_second=load.dispatch_per_s,
        overdue=load.overdue,
        lag_p99_ms=load.lag_p99_ms,
        shard_count=load.shard_count,
        shards_owned=load.shards_owned,
        owners=[
            cluster_pb2.ShardOwner(shard=shard, worker_id=worker, epoch=epoch)
            for shard, worker, epoch in load.owners
        ],
        scale_decision=(
            None if load.scale_decision is None else scale_decision_to_pb(load.scale_decision)
        ),
    )


def cluster_load_from_pb(load: cluster_pb2.ClusterLoad) -> ClusterLoad:
    """The workers' reports (the sums are computed from them, as the server did)."""
    workers = tuple(
        WorkerLoad(
            worker_id=w.worker_id,
            shards=w.shards,
            due_per_s=w.due_per_second,
            overdue=w.overdue,
            dispatch_per_s=w.dispatch_per_second,
            lag_p50_ms=w.lag_p50_ms,
            lag_p99_ms=w.lag_p99_ms,
            in_flight=w.in_flight,
            window_s=w.window_seconds,
            report_ms=ts_to_ms(w.report_time, "worker.report_time"),
        )
        for w in load.workers
    )
    owners = tuple((o.shard, o.worker_id, o.epoch) for o in load.owners)
    decision = (
        scale_decision_from_pb(load.scale_decision) if load.HasField("scale_decision") else None
    )
    return ClusterLoad(
        workers,
        shard_count=load.shard_count,
        shards_owned=load.shards_owned,
        owners=owners,
        scale_decision=decision,
    )


def scale_decision_to_pb(d: ScaleDecision) -> cluster_pb2.ScaleDecision:
    out = cluster_pb2.ScaleDecision(
        deployment=d.deployment,
        current_replicas=d.current_replicas,
        desired_replicas=d.desired_replicas,
        reason=d.reason,
        decide_time=ms_to_ts(d.decide_ms),
        decided_by=d.decided_by,
    )
    _set_opt_ts(out, "last_change_time", d.last_change_ms)
    return out


def scale_decision_from_pb(d: cluster_pb2.ScaleDecision) -> ScaleDecision:
    """Validated: InvalidArgument names the first bad field."""
    if not d.HasField("decide_time"):
        raise InvalidArgument("decide_time", "is required")
    decision = ScaleDecision(
        deployment=d.deployment,
        current_replicas=d.current_replicas,
        desired_replicas=d.desired_replicas,
        reason=d.reason,
        decide_ms=ts_to_ms(d.decide_time, "decide_time"),
        last_change_ms=_opt_ts(d, "last_change_time", "last_change_time"),
        decided_by=d.decided_by,
    )
    decision.validate()
    return decision
