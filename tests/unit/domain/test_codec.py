from __future__ import annotations

from clockwork_svc.domain.codec import spec_from_json, spec_to_json
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    MisfirePolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.domain.triggers import CronTrigger, IntervalTrigger, OnceTrigger


def test_every_field_round_trips() -> None:
    for trigger in (
        OnceTrigger(5),
        IntervalTrigger(1000, 1, 99_000, 3),
        CronTrigger("0 9 * * 1-5", "Europe/Paris", None, 10**13, None),
    ):
        spec = ScheduleSpec(
            trigger=trigger,
            target=HttpTarget("https://x.io/a?b=c", "PATCH", (("A", "1"), ("B", "2")), 3000),
            payload=b"\x00\xff",
            retry=RetryPolicy(RetryKind.EXPONENTIAL, 7, 100, 900, 1.5),
            relevancy_window_ms=5,
            jitter_ms=6,
            ordering_key="o",
            misfire=MisfirePolicy.SKIP,
            pause_after_failures=5,
        )
        assert spec_from_json(spec_to_json(spec), spec.payload) == spec


def test_missing_optional_fields_take_defaults() -> None:
    text = '{"trigger":{"type":"once","at_ms":1},"http":{"url":"https://x.io/"}}'
    spec = spec_from_json(text, b"")
    assert isinstance(spec.target, HttpTarget)
    assert spec.retry == RetryPolicy() and spec.target.method == "POST"


def test_kafka_target_round_trips() -> None:
    spec = ScheduleSpec(
        trigger=OnceTrigger(5),
        target=KafkaTarget("orders.due", (("source", "clockwork"),)),
        payload=b"{}",
        ordering_key="order-7",
    )
    assert spec_from_json(spec_to_json(spec), spec.payload) == spec
