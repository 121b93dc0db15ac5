from __future__ import annotations

import pytest

from clockwork_operator.autoscale import Load, ScalePolicy, decide

POLICY = ScalePolicy(
    min_replicas=1,
    max_replicas=5,
    target_per_replica=100.0,
    lag_target_ms=500.0,
    hysteresis=0.2,
    scale_up_cooldown_s=30.0,
    scale_down_cooldown_s=300.0,
    drain_s=10.0,
)


def load(due: float = 0, dispatch: float = 0, overdue: int = 0, lag: float = 0) -> Load:
    return Load(due, dispatch, overdue, lag)


def test_scales_up_to_demand_and_clamps_to_max() -> None:
    assert decide(POLICY, load(due=250), 1, 1000, None).replicas == 3
    assert decide(POLICY, load(dispatch=250), 1, 1000, None).replicas == 3
    assert decide(POLICY, load(due=10_000), 1, 1000, None).replicas == 5


def test_overdue_backlog_counts_as_demand() -> None:
    # 100/s due + 2000 overdue over 10 s = 300/s
    assert decide(POLICY, load(due=100, overdue=2000), 1, 1000, None).replicas == 3


def test_lag_with_backlog_adds_a_worker_even_if_rate_fits() -> None:
    d = decide(POLICY, load(due=50, overdue=1, lag=900), 2, 1000, None)
    assert d.replicas == 3 and "lag" in d.reason
    # lag with nothing overdue (say, one slow endpoint) adds no worker, but holds a
    # scale-down that the rate alone would allow
    assert decide(POLICY, load(due=50, lag=900), 2, 1000, None).replicas == 2
    assert decide(POLICY, load(due=50, lag=100), 2, 1000, None).replicas == 1


def test_scale_up_waits_for_its_cooldown() -> None:
    d = decide(POLICY, load(due=250), 1, now_s=1000, last_change_s=990)
    assert d.replicas == 1 and "cool-down" in d.reason
    assert decide(POLICY, load(due=250), 1, now_s=1031, last_change_s=1000).replicas == 3


def test_scale_down_needs_headroom_and_the_longer_cooldown() -> None:
    # 3 replicas, demand 190/s: 2 replicas would run at 95% (> 80%): stay
    assert decide(POLICY, load(due=190), 3, 10_000, None).replicas == 3
    # demand 150/s fits in 2 with 20% headroom
    assert decide(POLICY, load(due=150), 3, 10_000, None).replicas == 2
    assert decide(POLICY, load(due=150), 3, 10_000, last_change_s=9_800).replicas == 3
    assert decide(POLICY, load(), 3, 10_000, None).replicas == 1  # idle: down to min
    # never down while firings are overdue
    assert decide(POLICY, load(due=10, overdue=5), 3, 10_000, None).replicas == 3


def test_no_flapping_around_a_threshold() -> None:
    current = 2
    for demand in (195, 205, 195, 205, 195):
        d = decide(POLICY, load(due=demand), current, 100_000, None)
        current = d.replicas
    assert current == 3  # went up once at 205, never back down at 195


def test_out_of_range_replicas_are_clamped_at_once() -> None:
    assert decide(POLICY, load(), 9, 0, last_change_s=0).replicas == 5
    assert decide(POLICY, load(), 0, 0, last_change_s=0).replicas == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_replicas": 3, "max_replicas": 2},
        {"max_replicas": 0, "min_replicas": 0},
        {"target_per_replica": 0},
        {"hysteresis": 1.0},
        {"drain_s": 0},
    ],
)
def test_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must|need"):
        ScalePolicy(**kwargs)  # type: ignore[arg-type]
