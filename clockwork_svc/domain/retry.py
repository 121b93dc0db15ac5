"""Retry delays: none, fixed, or exponential with full jitter."""

from __future__ import annotations

from clockwork_svc.domain.spec import RetryKind, RetryPolicy


def attempts_allowed(policy: RetryPolicy) -> int:
    return policy.resolved().max_attempts


def retry_delay_ms(policy: RetryPolicy, failed_attempt: int, rnd: float) -> int:
    """Delay before the attempt after `failed_attempt` (1-based).

    `rnd` is a uniform random number in [0, 1), passed in so the arithmetic is pure.
    Exponential uses full jitter (uniform over [0, cap)), which spreads a burst of
    failures evenly instead of retrying them in lockstep.
    """
    resolved = policy.resolved()
    if resolved.kind is RetryKind.NONE:
        return 0
    if resolved.kind is RetryKind.FIXED:
        return resolved.initial_delay_ms
    exponent = min(failed_attempt - 1, 64)
    cap = min(resolved.max_delay_ms, resolved.initial_delay_ms * resolved.multiplier**exponent)
    return int(cap * rnd)
