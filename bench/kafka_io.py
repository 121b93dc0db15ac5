"""Kafka for the benchmarks (the only bench module that imports aiokafka): the topic a
run delivers to, a producer configured as a worker's (`delivery.kafka.new_producer`)
sending a worker's headers, the raw producer limit, and the consumer the Kafka sink records with.

A benchmark topic stores the broker's append time in each record
(`message.timestamp.type=LogAppendTime`): the sink reports that as the receive time, so
a firing's lag is the time until the broker holds it, whatever the consumer's own delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from clockwork_svc.delivery.kafka import new_producer
from clockwork_svc.domain import signing

PARTITIONS = 8


class _QuietNewTopic(logging.Filter):
    """A just-created topic's partitions answer NotLeaderForPartition until the broker
    has loaded them, and the consumer logs each retry as an error: drop those."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "NotLeaderForPartitionError" not in record.getMessage()


async def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        new = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=1,
            topic_configs={"message.timestamp.type": "LogAppendTime"},
        )
        await admin.create_topics([new])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


@asynccontextmanager
async def producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer configured as a worker's."""
    made = new_producer(bootstrap, client_id="clockwork-bench")
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


async def send(
    made: AIOKafkaProducer,
    topic: str,
    payload: bytes,
    delivery_id: str,
    timestamp_s: int,
    key: str,
) -> None:
    """Produce one delivery with a worker's headers (an unsigned tenant's); returns once
    the broker has it."""
    headers = signing.webhook_headers(delivery_id, timestamp_s, payload, ())
    encoded = [(name, value.encode()) for name, value in headers.items()]
    await made.send_and_wait(topic, value=payload, key=key.encode(), headers=encoded)


async def blast(
    bootstrap: str, topic: str, payload: bytes, ids: Sequence[str], concurrency: int
) -> float:
    """Produce one message per id, `concurrency` awaiting at once; returns messages/s."""
    todo = iter(ids)
    timestamp_s = int(time.time())
    async with producer(bootstrap) as made:

        async def sender() -> None:
            for delivery_id in todo:
                await send(made, topic, payload, delivery_id, timestamp_s, delivery_id)

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        return len(ids) / (time.perf_counter() - started)


async def consume(bootstrap: str, topic: str, record: Callable[[str, int], None]) -> None:
    """Call `record(webhook-id, broker append time in µs)` for every message of `topic`,
    from its beginning, until cancelled."""
    logging.getLogger("aiokafka.consumer.fetcher").addFilter(_QuietNewTopic())
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
    )
    await consumer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            for messages in batches.values():
                for message in messages:
                    delivery_id = dict(message.headers).get("webhook-id", b"").decode()
                    record(delivery_id, message.timestamp * 1000)
    finally:
        await consumer.stop()
