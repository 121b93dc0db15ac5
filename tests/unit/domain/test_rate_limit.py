from __future__ import annotations

import pytest

from clockwork_svc.domain.rate_limit import TokenBucket
from clockwork_svc.domain.tenant import TenantLimits, validate_limits
from clockwork_svc.errors import InvalidArgument


def test_burst_then_reserved_slots_at_the_rate() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3.0)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    # A backlog gets distinct, increasing slots instead of retrying together.
    assert [bucket.reserve(0.0) for _ in range(3)] == pytest.approx([0.5, 1.0, 1.5])
    assert bucket.reserve(1.5) == pytest.approx(0.5)


def test_refill_never_exceeds_the_burst() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=2.0)
    bucket.reserve(0.0)
    assert bucket.reserve(100.0) == 0.0
    assert bucket.tokens == pytest.approx(1.0)


def test_unlimited_never_waits() -> None:
    bucket = TokenBucket(rate_per_s=0.0, burst=0.0)
    assert all(bucket.reserve(0.0) == 0.0 for _ in range(1000))


def test_retune_caps_tokens_at_the_new_burst() -> None:
    bucket = TokenBucket(rate_per_s=10.0, burst=10.0)
    bucket.reserve(0.0)
    bucket.retune(1.0, 2.0)
    assert bucket.tokens == 2.0


def test_limits_round_trip_and_validation() -> None:
    limits = TenantLimits(
        rate_per_s=5.5, burst=3, max_concurrency=2, paused=True, drain_rate_per_s=1.0
    )
    assert TenantLimits.from_json(limits.to_json()) == limits
    assert TenantLimits.from_json('{"rate_per_s": 1, "future_field": 3}') == TenantLimits(1)
    assert TenantLimits.from_json(None) == TenantLimits()
    for bad, field in [
        (TenantLimits(rate_per_s=-1), "limits.rate_per_s"),
        (TenantLimits(max_concurrency=-2), "limits.max_concurrency"),
    ]:
        with pytest.raises(InvalidArgument) as err:
            validate_limits(bad)
        assert err.value.field == field
