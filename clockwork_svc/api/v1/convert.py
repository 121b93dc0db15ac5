"""Conversions between the v1 protobuf messages and domain objects.

Shared by the servicer (requests in, schedules out) and the client (specs out,
schedules in). Field paths in errors use the proto field names. Generated code
(`*_pb2*`) lives beside this module; scripts/gen_proto.py writes only those files.
"""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import DeadLetter, Execution, Outcome, Schedule, ScheduleState
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    MisfirePolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    Target,
)
from clockwork_svc.errors import InvalidArgument

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
}


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


def spec_from_pb(spec: pb.ScheduleSpec, prefix: str = "spec") -> ScheduleSpec:
    kind = spec.WhichOneof("trigger")
    trigger: triggers.Trigger
    if kind == "once":
        if not spec.once.HasField("at"):
            raise InvalidArgument(f"{prefix}.once.at", "is required")
        trigger = triggers.OnceTrigger(ts_to_ms(spec.once.at, f"{prefix}.once.at"))
    elif kind == "interval":
        iv = spec.interval
        trigger = triggers.IntervalTrigger(
            every_ms=dur_to_ms(iv.every, f"{prefix}.interval.every"),
            start_ms=_opt_ts(iv, "start", f"{prefix}.interval.start"),
            end_ms=_opt_ts(iv, "end", f"{prefix}.interval.end"),
            count=iv.count or None,
        )
    elif kind == "cron":
        cr = spec.cron
        trigger = triggers.CronTrigger(
            expression=cr.expression,
            timezone=cr.timezone or "UTC",
            start_ms=_opt_ts(cr, "start", f"{prefix}.cron.start"),
            end_ms=_opt_ts(cr, "end", f"{prefix}.cron.end"),
            count=cr.count or None,
        )
    else:
        raise InvalidArgument(f"{prefix}.trigger", "one of once, interval or cron is required")
    target = _target_from_pb(spec, prefix)
    retry = retry_from_pb(spec.retry, f"{prefix}.retry")
    if spec.misfire not in _MISFIRE:
        raise InvalidArgument(f"{prefix}.misfire", "unknown misfire policy")
    return ScheduleSpec(
        trigger=trigger,
        target=target,
        payload=spec.payload,
        retry=retry,
        relevancy_window_ms=dur_to_ms(spec.relevancy_window, f"{prefix}.relevancy_window"),
        jitter_ms=dur_to_ms(spec.jitter, f"{prefix}.jitter"),
        ordering_key=spec.ordering_key,
        misfire=_MISFIRE[spec.misfire],
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
        payload=spec.payload, ordering_key=spec.ordering_key, misfire=_MISFIRE_PB[spec.misfire]
    )
    t = spec.trigger
    if isinstance(t, triggers.OnceTrigger):
        out.once.at.CopyFrom(ms_to_ts(t.at_ms))
    elif isinstance(t, triggers.IntervalTrigger):
        out.interval.every.CopyFrom(ms_to_dur(t.every_ms))
        _set_window(out.interval, t.start_ms, t.end_ms, t.count)
    else:
        out.cron.expression = t.expression
        out.cron.timezone = t.timezone
        _set_window(out.cron, t.start_ms, t.end_ms, t.count)
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
    )
    if s.next_fire_ms is not None and s.state is ScheduleState.ACTIVE:
        out.next_fire_time.CopyFrom(ms_to_ts(s.next_fire_ms))
    if s.last_fire_ms is not None:
        out.last_fire_time.CopyFrom(ms_to_ts(s.last_fire_ms))
    return out


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
    )
    if e.next_attempt_ms is not None:
        out.next_attempt_time.CopyFrom(ms_to_ts(e.next_attempt_ms))
    return out


def dead_letter_to_pb(d: DeadLetter) -> pb.DeadLetter:
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
