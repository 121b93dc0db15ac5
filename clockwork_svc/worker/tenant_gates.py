"""Per-tenant admission on one worker: rate (token bucket), concurrency, sidelining.

Each worker enforces its share of a tenant's limits: limit x (shards it owns / shard
count). Since a tenant's firings spread evenly over shards, the shares add up to the
tenant's limit across the cluster without any coordination between workers.

A firing passes two gates. When it is taken from the due queue, READ_AHEAD_MS
before its due time (`admit`): the tenant must not be paused, its rate must allow
it, and the tenant may not already have `ahead_cap` firings between this point and
their delivery. At its due time (`start_delivery`): the tenant may not already have
its concurrency limit's worth of deliveries in flight. A firing waiting for its due
time (or for a delivery turn) counts against the first bound only, so a tenant's
concurrency limit counts deliveries, and the read ahead of the due time is never
held back by a limit on deliveries.

Whatever its limits, no tenant holds more than `cap` of a worker's delivery slots,
nor more than `ahead_cap` of its places ahead of the due time (`--max-tenant-share`
of each): a tenant whose endpoint hangs ties up its own share, and the other
tenants' firings still find slots.
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
    # The tenant has `ahead_cap` firings on their way: wait for one to be delivered.
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
    # Admitted, not yet delivering (waiting for the due time or a delivery turn).
    ahead: int = 0
    delivering: int = 0


class TenantGates:
    def __init__(self, cap: int | None = None, ahead_cap: int | None = None) -> None:
        self._tenants: dict[str, _TenantState] = {}
        self._cap = cap
        self._ahead_cap = ahead_cap

    def admit(
        self,
        tenant: str,
        limits: TenantLimits,
        share: float,
        now_s: float,
        reserved: bool = False,
        draining: bool = False,
    ) -> Admission:
        """Decide for one firing taken from the due queue. `reserved`: it already
        holds a token (it waited for it); `draining`: it was held while the tenant
        was paused. GO counts it ahead until `start_delivery` or `withdraw`."""
        if limits.paused:
            return Admission(Verdict.HOLD)
        state = self._tenants.setdefault(tenant, _TenantState())
        if self._ahead_cap is not None and state.ahead >= self._ahead_cap:
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
        state.ahead += 1
        return Admission(Verdict.GO)

    def start_delivery(self, tenant: str, limits: TenantLimits, share: float) -> bool:
        """At the due time: True (and counted delivering, no longer ahead) if the
        tenant has a delivery turn free; False: wait for one of its deliveries."""
        state = self._tenants.setdefault(tenant, _TenantState())
        allowed = self._cap
        if limits.max_concurrency:
            own = max(1, math.floor(limits.max_concurrency * share))
            allowed = own if allowed is None else min(allowed, own)
        if allowed is not None and state.delivering >= allowed:
            return False
        state.ahead = max(0, state.ahead - 1)
        state.delivering += 1
        return True

    def withdraw(self, tenant: str) -> None:
        """An admitted firing leaves before its delivery (superseded, put back)."""
        state = self._tenants.get(tenant)
        if state is not None and state.ahead > 0:
            state.ahead -= 1

    def finished(self, tenant: str) -> None:
        """A delivery returned."""
        state = self._tenants.get(tenant)
        if state is not None and state.delivering > 0:
            state.delivering -= 1
