"""How many workers the cluster needs: a pure decision from the load the workers
report, the current replica count and the time of the last change.

- Demand is the larger of the firings due per second (what is coming) and the
  deliveries started per second (what is being done), plus the overdue backlog
  spread over `drain_s`.
- Up: as soon as demand needs more replicas than there are, or the p99 lag is over
  its target while firings are overdue (then at least one more), once the scale-up
  cool-down has passed since the last change.
- Down: only when the smaller count would still have `hysteresis` headroom, nothing
  is overdue and lag is within target, once the (longer) scale-down cool-down has
  passed. The band stops flapping around a threshold.
- Always within [min_replicas, max_replicas].
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    min_replicas: int = 1
    max_replicas: int = 10
    # Firings per second one worker is sized for (measure it: docs/scale-model.md).
    target_per_replica: float = 500.0
    lag_target_ms: float = 1000.0
    # A scale-down needs this much spare capacity left on the smaller count.
    hysteresis: float = 0.2
    scale_up_cooldown_s: float = 30.0
    scale_down_cooldown_s: float = 300.0
    # An overdue backlog counts as demand spread over this many seconds.
    drain_s: float = 30.0

    def __post_init__(self) -> None:
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.target_per_replica <= 0:
            raise ValueError("target_per_replica must be positive")
        if not 0 <= self.hysteresis < 1:
            raise ValueError("hysteresis must be in [0, 1)")
        if self.drain_s <= 0:
            raise ValueError("drain_s must be positive")


@dataclass(frozen=True, slots=True)
class Load:
    due_per_s: float
    dispatch_per_s: float
    overdue: int
    lag_p99_ms: float


@dataclass(frozen=True, slots=True)
class Decision:
    replicas: int
    reason: str

    def changes(self, current: int) -> bool:
        return self.replicas != current


def demand_per_s(load: Load, policy: ScalePolicy) -> float:
    return max(load.due_per_s, load.dispatch_per_s) + load.overdue / policy.drain_s


def decide(
    policy: ScalePolicy,
    load: Load,
    current: int,
    now_s: float,
    last_change_s: float | None,
) -> Decision:
    demand = demand_per_s(load, policy)
    since = math.inf if last_change_s is None else now_s - last_change_s
    if current < policy.min_replicas or current > policy.max_replicas:
        return Decision(
            _clamp(policy, current), f"outside [{policy.min_replicas}, {policy.max_replicas}]"
        )

    needed = math.ceil(demand / policy.target_per_replica)
    lagging = load.lag_p99_ms > policy.lag_target_ms and load.overdue > 0
    if lagging:
        needed = max(needed, current + 1)
    up = _clamp(policy, needed)
    if up > current:
        if since < policy.scale_up_cooldown_s:
            return Decision(current, f"scale-up to {up} waits for the cool-down")
        why = f"lag p99 {load.lag_p99_ms:.0f} ms with {load.overdue} overdue" if lagging else ""
        return Decision(up, why or f"demand {demand:.1f}/s needs {up}")

    roomy = math.ceil(demand / (policy.target_per_replica * (1 - policy.hysteresis)))
    down = _clamp(policy, roomy)
    if down < current and load.overdue == 0 and load.lag_p99_ms <= policy.lag_target_ms:
        if since < policy.scale_down_cooldown_s:
            return Decision(current, f"scale-down to {down} waits for the cool-down")
        return Decision(down, f"demand {demand:.1f}/s fits in {down}")
    return Decision(current, f"demand {demand:.1f}/s fits")


def _clamp(policy: ScalePolicy, replicas: int) -> int:
    return max(policy.min_replicas, min(policy.max_replicas, replicas))
