"""Fakes shared by the worker unit tests (pure logic; the real sinks have their own
integration tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from clockwork_svc.domain.model import DeliveryResult, Firing
from clockwork_svc.domain.spec import Target
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.tenancy import NO_LIMITS


class RecordingSink:
    """A `DeliverySink` that accepts everything and records the schedule keys (and when
    each was first sent, by the system clock), and the most deliveries in flight at
    once. With `hold_s`, each delivery takes that long."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.delivered: list[str] = []
        self.sent_ms: dict[str, int] = {}
        self.hold_s = hold_s
        self.in_flight = 0
        self.most_in_flight = 0

    async def deliver(
        self,
        target: Target,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
        traceparent: str = "",
    ) -> DeliveryResult:
        self.delivered.append(firing.schedule_key)
        self.sent_ms.setdefault(firing.schedule_key, time.time_ns() // 1_000_000)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hold_s:
                await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        return DeliveryResult(True, False, 200)

    async def close(self) -> None:
        return None


class FixedTenants:
    """A worker's `TenantSource`: every tenant has `limits`, no signing secrets and the
    default policies."""

    def __init__(self, limits: TenantLimits = NO_LIMITS) -> None:
        self.fixed_limits = limits

    async def limits(self, tenant: str) -> TenantLimits:
        return self.fixed_limits

    async def signing_secrets(self, tenant: str) -> tuple[str, ...]:
        return ()

    async def defaults(self, tenant: str) -> TenantDefaults:
        return TenantDefaults()
