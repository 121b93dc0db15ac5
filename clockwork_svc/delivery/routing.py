"""The worker's DeliverySink: sends each firing to the sink of its target's kind."""

from __future__ import annotations

from collections.abc import Sequence

from clockwork_svc.delivery.http import HttpSink
from clockwork_svc.delivery.kafka import KafkaSink
from clockwork_svc.domain.model import DeliveryResult, Firing
from clockwork_svc.domain.spec import KafkaTarget, Target


class RoutingSink:
    def __init__(self, http: HttpSink, kafka: KafkaSink) -> None:
        self._http = http
        self._kafka = kafka

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
        if isinstance(target, KafkaTarget):
            return await self._kafka.deliver(
                target, payload, firing, timestamp_s, signing_secrets, key, traceparent
            )
        return await self._http.deliver(
            target, payload, firing, timestamp_s, signing_secrets, traceparent
        )

    async def close(self) -> None:
        await self._http.close()
        await self._kafka.close()
