"""Stable JSON encoding of a ScheduleSpec for storage (the payload is stored apart).

Explicit columns-as-JSON rather than pickle: readable with cqlsh and sqlite3, and
tolerant of fields added later (missing keys take their defaults).
"""

from __future__ import annotations

import json
from typing import Any

from clockwork_svc.domain import triggers
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

_TRIGGER_TYPES: dict[str, type[Any]] = {
    "once": triggers.OnceTrigger,
    "interval": triggers.IntervalTrigger,
    "cron": triggers.CronTrigger,
}


def _trigger_to_dict(trigger: triggers.Trigger) -> dict[str, Any]:
    if isinstance(trigger, triggers.OnceTrigger):
        return {"type": "once", "at_ms": trigger.at_ms}
    if isinstance(trigger, triggers.IntervalTrigger):
        return {
            "type": "interval",
            "every_ms": trigger.every_ms,
            "start_ms": trigger.start_ms,
            "end_ms": trigger.end_ms,
            "count": trigger.count,
        }
    return {
        "type": "cron",
        "expression": trigger.expression,
        "timezone": trigger.timezone,
        "start_ms": trigger.start_ms,
        "end_ms": trigger.end_ms,
        "count": trigger.count,
    }


def _trigger_from_dict(data: dict[str, Any]) -> triggers.Trigger:
    fields = dict(data)
    kind = fields.pop("type")
    result: triggers.Trigger = _TRIGGER_TYPES[kind](**fields)
    return result


def _target_to_dict(target: Target) -> dict[str, Any]:
    if isinstance(target, KafkaTarget):
        return {"kafka": {"topic": target.topic, "headers": [list(h) for h in target.headers]}}
    return {
        "http": {
            "url": target.url,
            "method": target.method,
            "headers": [list(h) for h in target.headers],
            "timeout_ms": target.timeout_ms,
        }
    }


def _target_from_dict(doc: dict[str, Any]) -> Target:
    if "kafka" in doc:
        kafka = doc["kafka"]
        return KafkaTarget(
            topic=kafka["topic"],
            headers=tuple((str(k), str(v)) for k, v in kafka.get("headers", [])),
        )
    http = doc["http"]
    return HttpTarget(
        url=http["url"],
        method=http.get("method", "POST"),
        headers=tuple((str(k), str(v)) for k, v in http.get("headers", [])),
        timeout_ms=http.get("timeout_ms", 0),
    )


def retry_to_dict(retry: RetryPolicy) -> dict[str, Any]:
    return {
        "kind": retry.kind.value,
        "max_attempts": retry.max_attempts,
        "initial_delay_ms": retry.initial_delay_ms,
        "max_delay_ms": retry.max_delay_ms,
        "multiplier": retry.multiplier,
        "max_age_ms": retry.max_age_ms,
    }


def retry_from_dict(retry: dict[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        kind=RetryKind(retry.get("kind", "default")),
        max_attempts=retry.get("max_attempts", 0),
        initial_delay_ms=retry.get("initial_delay_ms", 0),
        max_delay_ms=retry.get("max_delay_ms", 0),
        multiplier=retry.get("multiplier", 0.0),
        max_age_ms=retry.get("max_age_ms", 0),
    )


def spec_to_json(spec: ScheduleSpec) -> str:
    target = spec.target
    doc = {
        "trigger": _trigger_to_dict(spec.trigger),
        **_target_to_dict(target),
        "retry": retry_to_dict(spec.retry),
        "relevancy_window_ms": spec.relevancy_window_ms,
        "jitter_ms": spec.jitter_ms,
        "ordering_key": spec.ordering_key,
        "misfire": spec.misfire.value,
    }
    if spec.pause_after_failures:
        doc["pause_after_failures"] = spec.pause_after_failures
    if spec.overlap is not OverlapPolicy.ALLOW_ALL:
        doc["overlap"] = spec.overlap.value
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def spec_from_json(text: str, payload: bytes) -> ScheduleSpec:
    doc = json.loads(text)
    retry = doc.get("retry", {})
    return ScheduleSpec(
        trigger=_trigger_from_dict(doc["trigger"]),
        target=_target_from_dict(doc),
        payload=payload,
        retry=retry_from_dict(retry),
        relevancy_window_ms=doc.get("relevancy_window_ms", 0),
        jitter_ms=doc.get("jitter_ms", 0),
        ordering_key=doc.get("ordering_key", ""),
        misfire=MisfirePolicy(doc.get("misfire", "fire_latest")),
        pause_after_failures=doc.get("pause_after_failures", 0),
        overlap=OverlapPolicy(doc.get("overlap", "allow_all")),
    )
