"""The `ClockworkSchedule` custom resource, in and out: its spec becomes a Clockwork
schedule spec, a schedule becomes its status. Pure: no I/O, no Kubernetes client.

Errors name the resource's own fields (`spec.schedule.cron`), so `kubectl describe`
points at the line to fix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clockwork_svc.domain import triggers
from clockwork_svc.domain.durations import format_time_ms, parse_duration_ms, parse_time_ms
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    MisfirePolicy,
    OverlapPolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    Target,
)

GROUP = "clockwork.io"
VERSION = "v1alpha1"
PLURAL = "clockworkschedules"
KIND = "ClockworkSchedule"
MAX_KEY = 200


class SpecError(ValueError):
    """An invalid resource field; `field` is its path, e.g. `spec.schedule.every`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class SecretRef:
    name: str
    token_key: str = "token"
    tenant_key: str = "tenant"


@dataclass(frozen=True, slots=True)
class Desired:
    """What a resource asks for."""

    spec: ScheduleSpec
    suspend: bool
    secret: SecretRef | None


def schedule_key(namespace: str, name: str, uid: str) -> str:
    """The schedule's key: stable for one resource, new for a re-created one (new
    uid), within the API's 200-character key limit and alphabet."""
    key = f"k8s/{namespace}/{name}/{uid}"
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32]
    return f"k8s/{namespace[:100]}/{digest}/{uid}"


def desired(spec: Mapping[str, Any]) -> Desired:
    """Raises SpecError naming the first invalid field."""
    return Desired(
        ScheduleSpec(
            trigger=_trigger(_mapping(spec, "schedule", "spec.schedule", required=True)),
            target=_target(_mapping(spec, "target", "spec.target", required=True)),
            payload=_payload(spec),
            retry=_retry(_mapping(spec, "retry", "spec.retry")),
            relevancy_window_ms=_duration(spec, "relevancyWindow", "spec.relevancyWindow"),
            jitter_ms=_duration(spec, "jitter", "spec.jitter"),
            ordering_key=_text(spec, "orderingKey", "spec.orderingKey"),
            misfire=_misfire(spec),
            pause_after_failures=_pause_after_failures(spec),
            overlap=_overlap(spec),
        ),
        suspend=bool(spec.get("suspend", False)),
        secret=_secret(_mapping(spec, "tenantSecretRef", "spec.tenantSecretRef")),
    )


def _pause_after_failures(spec: Mapping[str, Any]) -> int:
    value = spec.get("pauseAfterFailures", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
        raise SpecError("spec.pauseAfterFailures", "must be an integer from 0 to 1000")
    return value


def _trigger(schedule: Mapping[str, Any]) -> triggers.Trigger:
    kinds = [k for k in ("cron", "every", "at") if schedule.get(k) not in (None, "")]
    if len(kinds) != 1:
        raise SpecError("spec.schedule", "set exactly one of cron, every, at")
    start = _time(schedule, "start", "spec.schedule.start")
    end = _time(schedule, "end", "spec.schedule.end")
    count = schedule.get("count")
    if count is not None and (not isinstance(count, int) or count < 1):
        raise SpecError("spec.schedule.count", "must be a positive integer")
    if kinds == ["at"]:
        at = _time(schedule, "at", "spec.schedule.at")
        assert at is not None
        return triggers.OnceTrigger(at)
    if kinds == ["every"]:
        every = _duration(schedule, "every", "spec.schedule.every")
        return triggers.IntervalTrigger(every, start, end, count)
    zone = _text(schedule, "timeZone", "spec.schedule.timeZone") or "UTC"
    return triggers.CronTrigger(
        _text(schedule, "cron", "spec.schedule.cron"), zone, start, end, count
    )


def _target(target: Mapping[str, Any]) -> Target:
    http = _mapping(target, "http", "spec.target.http")
    kafka = _mapping(target, "kafka", "spec.target.kafka")
    if bool(http) == bool(kafka):
        raise SpecError("spec.target", "set exactly one of http, kafka")
    if http:
        url = _text(http, "url", "spec.target.http.url")
        if not url:
            raise SpecError("spec.target.http.url", "is required")
        return HttpTarget(
            url=url,
            method=_text(http, "method", "spec.target.http.method") or "POST",
            headers=_headers(http, "spec.target.http.headers"),
            timeout_ms=_duration(http, "timeout", "spec.target.http.timeout"),
        )
    topic = _text(kafka, "topic", "spec.target.kafka.topic")
    if not topic:
        raise SpecError("spec.target.kafka.topic", "is required")
    return KafkaTarget(topic=topic, headers=_headers(kafka, "spec.target.kafka.headers"))


def _payload(spec: Mapping[str, Any]) -> bytes:
    text, encoded = spec.get("payload"), spec.get("payloadBase64")
    if text is not None and encoded is not None:
        raise SpecError("spec.payload", "set at most one of payload, payloadBase64")
    if encoded is not None:
        try:
            return base64.b64decode(str(encoded), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SpecError("spec.payloadBase64", f"is not base64: {exc}") from exc
    return str(text).encode() if text is not None else b""


_RETRY_KINDS = {
    "default": RetryKind.DEFAULT,
    "none": RetryKind.NONE,
    "fixed": RetryKind.FIXED,
    "exponential": RetryKind.EXPONENTIAL,
}


def _retry(retry: Mapping[str, Any]) -> RetryPolicy:
    if not retry:
        return RetryPolicy()
    policy = str(retry.get("policy", "default"))
    if policy not in _RETRY_KINDS:
        raise SpecError("spec.retry.policy", f"must be one of {', '.join(_RETRY_KINDS)}")
    attempts = retry.get("maxAttempts", 0)
    if not isinstance(attempts, int) or attempts < 0:
        raise SpecError("spec.retry.maxAttempts", "must be a non-negative integer")
    multiplier = retry.get("multiplier", 0)
    if not isinstance(multiplier, int | float) or isinstance(multiplier, bool):
        raise SpecError("spec.retry.multiplier", "must be a number")
    return RetryPolicy(
        kind=_RETRY_KINDS[policy],
        max_attempts=attempts,
        initial_delay_ms=_duration(retry, "initialDelay", "spec.retry.initialDelay"),
        max_delay_ms=_duration(retry, "maxDelay", "spec.retry.maxDelay"),
        multiplier=float(multiplier),
        max_age_ms=_duration(retry, "maxAge", "spec.retry.maxAge"),
    )


def _misfire(spec: Mapping[str, Any]) -> MisfirePolicy:
    value = spec.get("misfire", "fireLatest")
    choices = {"fireLatest": MisfirePolicy.FIRE_LATEST, "skip": MisfirePolicy.SKIP}
    if value not in choices:
        raise SpecError("spec.misfire", "must be fireLatest or skip")
    return choices[value]


def _overlap(spec: Mapping[str, Any]) -> OverlapPolicy:
    value = spec.get("overlap", "allowAll")
    choices = {
        "allowAll": OverlapPolicy.ALLOW_ALL,
        "skip": OverlapPolicy.SKIP,
        "bufferOne": OverlapPolicy.BUFFER_ONE,
    }
    if value not in choices:
        raise SpecError("spec.overlap", "must be allowAll, skip or bufferOne")
    return choices[value]


def _secret(ref: Mapping[str, Any]) -> SecretRef | None:
    if not ref:
        return None
    name = _text(ref, "name", "spec.tenantSecretRef.name")
    if not name:
        raise SpecError("spec.tenantSecretRef.name", "is required")
    return SecretRef(
        name,
        _text(ref, "tokenKey", "spec.tenantSecretRef.tokenKey") or "token",
        _text(ref, "tenantKey", "spec.tenantSecretRef.tenantKey") or "tenant",
    )


def _mapping(
    parent: Mapping[str, Any], key: str, field: str, required: bool = False
) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        if required:
            raise SpecError(field, "is required")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field, "must be an object")
    return value


def _text(parent: Mapping[str, Any], key: str, field: str) -> str:
    value = parent.get(key, "")
    if not isinstance(value, str):
        raise SpecError(field, "must be a string")
    return value


def _duration(parent: Mapping[str, Any], key: str, field: str) -> int:
    text = _text(parent, key, field)
    if not text:
        return 0
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise SpecError(field, str(exc)) from exc


def _time(parent: Mapping[str, Any], key: str, field: str) -> int | None:
    text = _text(parent, key, field)
    if not text:
        return None
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise SpecError(field, str(exc)) from exc


def _headers(parent: Mapping[str, Any], field: str) -> tuple[tuple[str, str], ...]:
    headers = _mapping(parent, "headers", field)
    for name, value in headers.items():
        if not isinstance(value, str):
            raise SpecError(f"{field}.{name}", "must be a string")
    return tuple(sorted((str(k), v) for k, v in headers.items()))


# --- status ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    """The schedule as the API reports it (a subset of the gRPC Schedule)."""

    key: str
    state: str  # ACTIVE, PAUSED, COMPLETED, CANCELLED
    next_fire_ms: int | None
    last_fire_ms: int | None
    last_outcome: str | None  # SUCCEEDED, RETRYING, FAILED, EXPIRED
    fired_count: int
    description: str
    tenant: str
    upcoming_ms: tuple[int, ...] = ()
    note: str = ""


def status(observed: Observed, generation: int | None) -> dict[str, Any]:
    """The resource's `status` for a schedule in sync with the spec."""
    return {
        "observedGeneration": generation,
        "scheduleKey": observed.key,
        "tenant": observed.tenant,
        "state": observed.state,
        "schedule": observed.description,
        "nextFireTime": _time_or_none(observed.next_fire_ms),
        "lastFireTime": _time_or_none(observed.last_fire_ms),
        "lastOutcome": observed.last_outcome,
        "firedCount": observed.fired_count,
        "upcomingFireTimes": [format_time_ms(ms) for ms in observed.upcoming_ms],
        "pauseNote": observed.note or None,
    }


def _time_or_none(ms: int | None) -> str | None:
    return format_time_ms(ms) if ms is not None else None


def ready_condition(ready: bool, reason: str, message: str, now_ms: int) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": format_time_ms(now_ms),
    }


def merge_conditions(
    current: Sequence[Mapping[str, Any]] | None, new: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Replace the condition of the same type; keep its transition time if the status
    did not change (Kubernetes convention)."""
    out: list[dict[str, Any]] = []
    for cond in current or []:
        if cond.get("type") != new["type"]:
            out.append(dict(cond))
        elif cond.get("status") == new["status"]:
            new = {**new, "lastTransitionTime": cond.get("lastTransitionTime")}
    out.append(dict(new))
    return out
