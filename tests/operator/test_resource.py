from __future__ import annotations

from typing import Any

import pytest

from clockwork_operator.resource import (
    Observed,
    SecretRef,
    SpecError,
    desired,
    merge_conditions,
    ready_condition,
    schedule_key,
    status,
)
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, KafkaTarget, MisfirePolicy, RetryKind


def http(**spec: Any) -> dict[str, Any]:
    return {"schedule": {"every": "30s"}, "target": {"http": {"url": "https://x.test/h"}}, **spec}


def test_cron_with_zone_http_target_and_everything_else() -> None:
    want = desired(
        {
            "schedule": {"cron": "0 9 * * 1-5", "timeZone": "Europe/Paris", "count": 3},
            "target": {
                "http": {
                    "url": "https://hooks.test/a",
                    "method": "PUT",
                    "headers": {"X-B": "2", "X-A": "1"},
                    "timeout": "5s",
                }
            },
            "payload": '{"a":1}',
            "retry": {"policy": "fixed", "maxAttempts": 4, "initialDelay": "2s", "maxAge": "1h"},
            "relevancyWindow": "10m",
            "misfire": "skip",
            "orderingKey": "acct-1",
            "pauseAfterFailures": 5,
            "suspend": True,
            "tenantSecretRef": {"name": "acme-token"},
        }
    )
    assert want.spec.trigger == triggers.CronTrigger("0 9 * * 1-5", "Europe/Paris", None, None, 3)
    assert want.spec.target == HttpTarget(
        "https://hooks.test/a", "PUT", (("X-A", "1"), ("X-B", "2")), 5000
    )
    assert want.spec.payload == b'{"a":1}'
    assert want.spec.retry.kind is RetryKind.FIXED
    assert (want.spec.retry.max_attempts, want.spec.retry.initial_delay_ms) == (4, 2000)
    assert want.spec.retry.max_age_ms == 3_600_000
    assert want.spec.relevancy_window_ms == 600_000
    assert want.spec.misfire is MisfirePolicy.SKIP
    assert want.spec.ordering_key == "acct-1"
    assert want.spec.pause_after_failures == 5
    assert want.suspend is True
    assert want.secret == SecretRef("acme-token", "token", "tenant")


def test_interval_once_and_kafka() -> None:
    every = desired(http(schedule={"every": "1m30s", "start": "2030-01-01T00:00:00Z"}))
    assert every.spec.trigger == triggers.IntervalTrigger(90_000, 1_893_456_000_000, None, None)
    once = desired(
        {
            "schedule": {"at": "2030-01-01T00:00:00+01:00"},
            "target": {"kafka": {"topic": "orders", "headers": {"h": "v"}}},
            "payloadBase64": "AAE=",
        }
    )
    assert once.spec.trigger == triggers.OnceTrigger(1_893_452_400_000)
    assert once.spec.target == KafkaTarget("orders", (("h", "v"),))
    assert once.spec.payload == b"\x00\x01"
    assert once.secret is None and once.suspend is False


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"target": {"http": {"url": "https://x"}}}, "spec.schedule"),
        (http(schedule={}), "spec.schedule"),
        (http(schedule={"cron": "* * * * *", "every": "1s"}), "spec.schedule"),
        (http(schedule={"every": "soon"}), "spec.schedule.every"),
        (http(schedule={"at": "tomorrow"}), "spec.schedule.at"),
        (http(schedule={"every": "1s", "count": 0}), "spec.schedule.count"),
        (http(schedule={"cron": 5}), "spec.schedule.cron"),
        ({"schedule": {"every": "1s"}}, "spec.target"),
        ({"schedule": {"every": "1s"}, "target": {}}, "spec.target"),
        ({"schedule": {"every": "1s"}, "target": {"http": {}}}, "spec.target"),
        (
            {"schedule": {"every": "1s"}, "target": {"http": {"method": "GET"}}},
            "spec.target.http.url",
        ),
        (
            {"schedule": {"every": "1s"}, "target": {"kafka": {"headers": {}}}},
            "spec.target.kafka.topic",
        ),
        (
            {"schedule": {"every": "1s"}, "target": {"http": {"url": "u", "headers": {"a": 1}}}},
            "spec.target.http.headers.a",
        ),
        (http(payload="x", payloadBase64="eA=="), "spec.payload"),
        (http(payloadBase64="not base64!"), "spec.payloadBase64"),
        (http(retry={"policy": "sometimes"}), "spec.retry.policy"),
        (http(retry={"maxAttempts": -1}), "spec.retry.maxAttempts"),
        (http(retry={"multiplier": "x"}), "spec.retry.multiplier"),
        (http(misfire="later"), "spec.misfire"),
        (http(pauseAfterFailures=1001), "spec.pauseAfterFailures"),
        (http(pauseAfterFailures="3"), "spec.pauseAfterFailures"),
        (http(relevancyWindow="forever"), "spec.relevancyWindow"),
        (http(tenantSecretRef={"tokenKey": "t"}), "spec.tenantSecretRef.name"),
        (http(tenantSecretRef="acme"), "spec.tenantSecretRef"),
    ],
)
def test_invalid_fields_are_named(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        desired(spec)
    assert caught.value.field == field


def test_schedule_key_is_stable_unique_per_uid_and_bounded() -> None:
    uid = "0b5e1c2a-9f3e-4f5e-8a1b-2c3d4e5f6a7b"
    assert schedule_key("team-a", "nightly", uid) == f"k8s/team-a/nightly/{uid}"
    assert schedule_key("team-a", "nightly", uid) != schedule_key("team-a", "nightly", uid[::-1])
    long_name = "n" * 253
    key = schedule_key("ns" * 31, long_name, uid)
    assert len(key) <= 200 and key.endswith(uid)
    assert key != schedule_key("ns" * 31, long_name[:-1] + "m", uid)


def test_status_and_conditions() -> None:
    seen = Observed(
        "k8s/a/b/u",
        "ACTIVE",
        1_893_456_000_000,
        None,
        "SUCCEEDED",
        7,
        "every 30s",
        "acme",
        (1_893_456_000_000, 1_893_456_030_000),
    )
    assert status(seen, 3) == {
        "observedGeneration": 3,
        "scheduleKey": "k8s/a/b/u",
        "tenant": "acme",
        "state": "ACTIVE",
        "schedule": "every 30s",
        "nextFireTime": "2030-01-01T00:00:00Z",
        "lastFireTime": None,
        "lastOutcome": "SUCCEEDED",
        "firedCount": 7,
        "upcomingFireTimes": ["2030-01-01T00:00:00Z", "2030-01-01T00:00:30Z"],
        "pauseNote": None,
    }
    first = ready_condition(False, "Retrying", "api down", 1_000)
    other = {"type": "Other", "status": "True"}
    merged = merge_conditions([other, first], ready_condition(False, "Retrying", "still", 9_000))
    assert merged[0] == other
    assert merged[1]["message"] == "still"
    assert merged[1]["lastTransitionTime"] == first["lastTransitionTime"]  # same status
    flipped = merge_conditions(merged, ready_condition(True, "Synced", "ok", 9_000))
    assert flipped[1]["status"] == "True"
    assert flipped[1]["lastTransitionTime"] == "1970-01-01T00:00:09Z"
