from __future__ import annotations

from clockwork_svc.domain.retry import attempts_allowed, retry_delay_ms
from clockwork_svc.domain.spec import RetryKind, RetryPolicy


def test_defaults_are_exponential_with_five_attempts() -> None:
    assert attempts_allowed(RetryPolicy()) == 5
    assert attempts_allowed(RetryPolicy(RetryKind.NONE)) == 1


def test_fixed_delay() -> None:
    policy = RetryPolicy(RetryKind.FIXED, 3, 1500)
    assert [retry_delay_ms(policy, n, 0.9) for n in (1, 2)] == [1500, 1500]


def test_exponential_full_jitter_is_bounded_by_the_growing_cap() -> None:
    policy = RetryPolicy(RetryKind.EXPONENTIAL, 10, 1000, 60_000, 2.0)
    assert retry_delay_ms(policy, 1, 0.999) < 1000
    assert retry_delay_ms(policy, 3, 0.999) < 4000
    assert retry_delay_ms(policy, 3, 0.5) == 2000
    assert retry_delay_ms(policy, 30, 0.999) < 60_000
    assert retry_delay_ms(policy, 5, 0.0) == 0
