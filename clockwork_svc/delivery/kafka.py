"""Kafka delivery (the only module that imports aiokafka).

One idempotent producer per worker (acks=all, enable_idempotence), started on first
use. The message key is the routing key (ordering key or schedule key), so messages of
one key keep their order on one partition; headers carry the Standard Webhooks
headers, so a consumer can deduplicate on webhook-id and verify the signature.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from clockwork_svc.domain import signing
from clockwork_svc.domain.model import DeliveryResult, Firing
from clockwork_svc.domain.spec import KafkaTarget

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 15.0


def new_producer(bootstrap_servers: str | None, client_id: str = "clockwork") -> AIOKafkaProducer:
    """A producer as a worker delivers with (not started): every send acknowledged by
    all in-sync replicas, idempotent, batched for up to 2 ms."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=10_000,
        linger_ms=2,
    )


class KafkaSink:
    def __init__(self, bootstrap_servers: str | None, client_id: str = "clockwork") -> None:
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()

    async def _ready(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._starting:
            if self._producer is None:
                producer = new_producer(self._bootstrap, self._client_id)
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    async def deliver(
        self,
        target: KafkaTarget,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
        traceparent: str = "",
    ) -> DeliveryResult:
        if not self._bootstrap:
            return DeliveryResult(False, False, error="this worker has no Kafka configured")
        headers = dict(target.headers)
        headers.update(
            signing.webhook_headers(firing.delivery_id, timestamp_s, payload, signing_secrets)
        )
        if traceparent:
            headers["traceparent"] = traceparent
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                producer = await self._ready()
                record = await producer.send_and_wait(
                    target.topic,
                    value=payload,
                    key=(key or firing.schedule_key).encode(),
                    headers=[(name, value.encode()) for name, value in headers.items()],
                )
        except TimeoutError:
            return DeliveryResult(False, True, error="Kafka produce timed out")
        except KafkaError as exc:
            retryable = bool(getattr(exc, "retriable", True))
            return DeliveryResult(False, retryable, error=f"Kafka: {exc!r}"[:512])
        except OSError as exc:
            return DeliveryResult(False, True, error=f"Kafka connection failed: {exc}"[:512])
        landed = (("kafka-partition", str(record.partition)), ("kafka-offset", str(record.offset)))
        return DeliveryResult(True, False, response_headers=landed)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
