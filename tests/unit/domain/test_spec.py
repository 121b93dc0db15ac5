from __future__ import annotations

import dataclasses

import pytest

from clockwork_svc.domain.spec import (
    HttpTarget,
    Limits,
    RetryPolicy,
    ScheduleSpec,
    validate_key,
    validate_spec,
)
from clockwork_svc.domain.triggers import CronTrigger, IntervalTrigger, OnceTrigger
from clockwork_svc.errors import InvalidArgument

GOOD = ScheduleSpec(trigger=OnceTrigger(1_800_000_000_000), target=HttpTarget("https://x.io/a"))


def field_of(spec: ScheduleSpec, limits: Limits | None = None) -> str:
    with pytest.raises(InvalidArgument) as err:
        validate_spec(spec, limits or Limits())
    return err.value.field


def with_target(**changes: object) -> ScheduleSpec:
    return dataclasses.replace(GOOD, target=dataclasses.replace(GOOD.target, **changes))  # type: ignore[arg-type]


def test_good_spec_passes() -> None:
    validate_spec(GOOD, Limits())


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://x.io/",
        "file:///etc/passwd",
        "http://",
        "https://user:pw@x.io/",
        "http://x.io:0/",
        "http://x.io:99999/",
        "http://x .io/",
        "x.io/path",
        "h" * 3000,
    ],
)
def test_bad_urls_name_the_url_field(url: str) -> None:
    assert field_of(with_target(url=url)) == "spec.http.url"


def test_bad_method_and_headers() -> None:
    assert field_of(with_target(method="GET")) == "spec.http.method"
    assert field_of(with_target(headers=(("webhook-id", "x"),))) == "spec.http.headers"
    assert field_of(with_target(headers=(("X-A", "a\r\nb"),))) == "spec.http.headers"
    assert field_of(with_target(headers=(("bad name", "v"),))) == "spec.http.headers"
    assert field_of(with_target(timeout_ms=600_000)) == "spec.http.timeout"


def test_payload_limit() -> None:
    big = dataclasses.replace(GOOD, payload=b"x" * 65_537)
    assert field_of(big) == "spec.payload"
    validate_spec(dataclasses.replace(GOOD, payload=b"x" * 65_536), Limits())
    assert field_of(dataclasses.replace(GOOD, payload=b"xx"), Limits(max_payload_bytes=1)) == (
        "spec.payload"
    )


def test_trigger_errors_are_prefixed() -> None:
    assert field_of(dataclasses.replace(GOOD, trigger=CronTrigger("61 * * * *"))).startswith(
        "spec.cron"
    )
    assert field_of(
        dataclasses.replace(GOOD, trigger=CronTrigger("0 * * * *", "Mars/Base"))
    ).startswith("spec.cron")
    assert field_of(dataclasses.replace(GOOD, trigger=IntervalTrigger(0))).startswith(
        "spec.interval"
    )
    assert field_of(
        dataclasses.replace(GOOD, trigger=IntervalTrigger(1000, start_ms=2000, end_ms=1000))
    ).startswith("spec.interval")


def test_retry_and_windows() -> None:
    assert field_of(dataclasses.replace(GOOD, retry=RetryPolicy(max_attempts=1000))) == (
        "spec.retry.max_attempts"
    )
    assert field_of(dataclasses.replace(GOOD, retry=RetryPolicy(multiplier=0.5))) == (
        "spec.retry.multiplier"
    )
    assert field_of(dataclasses.replace(GOOD, relevancy_window_ms=-1)) == "spec.relevancy_window"
    assert field_of(dataclasses.replace(GOOD, jitter_ms=10**12)) == "spec.jitter"
    assert field_of(dataclasses.replace(GOOD, ordering_key="no spaces")) == "spec.ordering_key"


@pytest.mark.parametrize("key", ["", "a b", "x" * 201, "ünïcode", "semi;colon"])
def test_bad_keys(key: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        validate_key(key)
    assert err.value.field == "key"
