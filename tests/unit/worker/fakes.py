"""Fakes shared by the worker unit tests (pure logic; the real sinks have their own
integration tests)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from clockwork_svc.domain.model import DeliveryResult, Firing
from clockwork_svc.domain.spec import Target


class RecordingSink:
    """A `DeliverySink` that accepts everything and records the schedule keys (and when
    each was first sent, by the system clock)."""

    def __init__(self) -> None:
        self.delivered: list[str] = []
        self.sent_ms: dict[str, int] = {}

    async def deliver(
        self,
        target: Target,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
    ) -> DeliveryResult:
        self.delivered.append(firing.schedule_key)
        self.sent_ms.setdefault(firing.schedule_key, time.time_ns() // 1_000_000)
        return DeliveryResult(True, False, 200)

    async def close(self) -> None:
        return None
