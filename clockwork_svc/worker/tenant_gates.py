"""Per-tenant admission on one worker: rate (token bucket), concurrency, sidelining.

Each worker enforces its share of a tenant's limits: limit x (shards it owns / shard
count). Since a tenant's firings spread evenly over shards, the shares add up to the
tenant's limit across the cluster without any coordination between workers.

Whatever its limits, no tenant holds more than `cap` of a worker's delivery slots
(`--max-tenant-share` of them): a tenant whose endpoint hangs ties up its own share,
and the other tenants' firings still find slots.
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
    def __init__(self, cap: int | None = None) -> None:
        self._tenants: dict[str, _TenantState] = {}
        self._cap = cap

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
        allowed = self._cap
        if limits.max_concurrency:
            own = max(1, math.floor(limits.max_concurrency * share))
            allowed = own if allowed is None else min(allowed, own)
        if allowed is not None and state.in_flight >= allowed:
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
