"""Fakes shared by the worker unit tests (pure logic; the real sinks have their own
integration tests)."""

from __future__ import annotations

from collections.abc import Sequence

from clockwork_svc.domain.model import DeliveryResult, Firing
from clockwork_svc.domain.spec import Target


class RecordingSink:
    """A `DeliverySink` that accepts everything and records the schedule keys."""

    def __init__(self) -> None:
        self.delivered: list[str] = []

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
        return DeliveryResult(True, False, 200)

    async def close(self) -> None:
        return None
