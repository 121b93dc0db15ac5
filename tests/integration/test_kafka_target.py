"""Kafka targets against a real Kafka broker (KRaft) started by e2e/infra."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from standardwebhooks.webhooks import Webhook

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import trace_context, triggers
from clockwork_svc.domain.model import Outcome
from clockwork_svc.domain.spec import KafkaTarget, RetryKind, RetryPolicy, ScheduleSpec
from clockwork_svc.server.auth import AuthSettings
from tests.conftest import require_server
from tests.integration.test_dev_node import dev_settings

pytestmark = pytest.mark.kafka
ADMIN = "admin-token-0123456789abcdef"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[app.Node]:
    bootstrap = require_server("CLOCKWORK_KAFKA")
    base = dev_settings(tmp_path)
    settings = dataclasses.replace(
        base,
        kafka=bootstrap,
        api=dataclasses.replace(base.api, auth=AuthSettings.from_pairs("", admin_token=ADMIN)),
    )
    async with app.running(settings, api=True, worker=True) as running:
        yield running


async def consume(
    topic: str, count: int, timeout_s: float, bootstrap: str | None = None
) -> list[object]:
    """Up to `count` records of `topic` from the start (the harness's broker unless
    `bootstrap`), waiting at most `timeout_s`."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap or require_server("CLOCKWORK_KAFKA"),
        group_id="test-" + uuid.uuid4().hex[:8],
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[object] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(records) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for batch in batches.values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def test_kafka_target_gets_key_payload_and_signed_headers(node: app.Node) -> None:
    assert node.api is not None
    topic = "due-" + uuid.uuid4().hex[:8]
    address = f"127.0.0.1:{node.api.port}"
    async with ClockworkClient(ClientSettings(address, token=ADMIN)) as admin:
        created = await admin.create_tenant("kafka-tenant")
    async with ClockworkClient(ClientSettings(address, token=created.token)) as client:
        spec = ScheduleSpec(
            triggers.IntervalTrigger(1000, count=3),
            KafkaTarget(topic, (("source", "clockwork-test"),)),
            payload=b'{"order": 7}',
            ordering_key="order-7",
        )
        await client.create("kafka-job", spec)
        records = await consume(topic, 3, 20)
        assert len(records) == 3
        ids = set()
        traces: set[trace_context.TraceParent | None] = set()
        for record in records:
            assert record.key == b"order-7"  # type: ignore[attr-defined]
            assert record.value == b'{"order": 7}'  # type: ignore[attr-defined]
            headers = {k: v.decode() for k, v in record.headers}  # type: ignore[attr-defined]
            assert headers["source"] == "clockwork-test"
            Webhook(created.signing_secret).verify(record.value, headers)  # type: ignore[attr-defined]
            ids.add(headers["webhook-id"])
            # Created without a caller's trace context: each delivery starts a trace.
            traces.add(trace_context.parse(headers["traceparent"]))
        assert len(ids) == 3
        assert None not in traces and len(traces) == 3
        await asyncio.sleep(0.3)
        executions = (await client.executions("kafka-job")).items
        assert [e.outcome for e in executions] == [Outcome.SUCCEEDED] * 3
        # Each execution says where its record landed.
        landed = {
            (dict(e.response_headers)["kafka-partition"], dict(e.response_headers)["kafka-offset"])
            for e in executions
        }
        assert landed == {(str(r.partition), str(r.offset)) for r in records}  # type: ignore[attr-defined]


async def test_unreachable_kafka_is_retried(tmp_path: Path) -> None:
    base = dev_settings(tmp_path)
    settings = dataclasses.replace(base, kafka="127.0.0.1:1")
    async with app.running(settings, api=True, worker=True) as running:
        assert running.api is not None
        address = f"127.0.0.1:{running.api.port}"
        async with ClockworkClient(ClientSettings(address, tenant="t")) as client:
            retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=200)
            spec = ScheduleSpec(triggers.OnceTrigger(now_ms()), KafkaTarget("nowhere"), retry=retry)
            await client.create("k", spec)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                letters = (await client.dead_letters()).items
                if letters:
                    break
                await asyncio.sleep(0.5)
            [letter] = letters
            assert letter.attempts == 2 and "Kafka" in letter.last_error
