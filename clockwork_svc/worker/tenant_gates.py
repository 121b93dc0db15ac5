"""Per-tenant admission on one worker: rate (token bucket), concurrency, sidelining.

Each worker enforces its share of a tenant's limits: limit x (shards it owns / shard
count). Since a tenant's firings spread evenly over shards, the shares add up to the
tenant's limit across the cluster without any coordination between workers.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from clockwork_svc.domain.rate_limit import TokenBucket
from clockwork_svc.domain.tenant import TenantLimits


class Verdict(enum.Enum):
    GO = "go"
    # Rate limited: a token is reserved `delay_s` from now; come back then.
    WAIT = "wait"
    # At the concurrency limit: wait for one of the tenant's deliveries to finish.
    FULL = "full"
    # The tenant is sidelined (paused): hold the firing until it is resumed.
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    delay_s: float = 0.0


@dataclass
class _TenantState:
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(0.0, 0.0))
    in_flight: int = 0


class TenantGates:
    def __init__(self) -> None:
        self._tenants: dict[str, _TenantState] = {}

    def admit(
        self,
        tenant: str,
        limits: TenantLimits,
        share: float,
        now_s: float,
        reserved: bool = False,
        draining: bool = False,
    ) -> Admission:
        """Decide for one due firing. `reserved`: it already holds a token (it waited
        for it); `draining`: it was held while the tenant was paused."""
        if limits.paused:
            return Admission(Verdict.HOLD)
        state = self._tenants.setdefault(tenant, _TenantState())
        if limits.max_concurrency:
            allowed = max(1, math.floor(limits.max_concurrency * share))
            if state.in_flight >= allowed:
                return Admission(Verdict.FULL)
        if not reserved:
            rate = (
                (limits.drain_rate_per_s or limits.rate_per_s) if draining else (limits.rate_per_s)
            )
            burst = limits.burst or max(1.0, limits.rate_per_s)
            state.bucket.retune(rate * share, max(1.0, burst * share))
            delay = state.bucket.reserve(now_s)
            if delay > 0:
                return Admission(Verdict.WAIT, delay)
        state.in_flight += 1
        return Admission(Verdict.GO)

    def finished(self, tenant: str) -> None:
        state = self._tenants.get(tenant)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1
