"""One tenant's endpoint that takes seconds to answer, or a Kafka broker that hangs, ties
up only that tenant's share of a worker's delivery slots (`--max-tenant-share`):
another tenant's firings, due meanwhile, go out on time. With the share at 1 (no
isolation) the same scenario starves the other tenant, which shows the test can tell.
Against the real api and worker on the embedded store, delivering to real HTTP
receivers on loopback and to a real Kafka broker of the test's own."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.delivery.kafka import SEND_TIMEOUT_S
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.settings import ProcessSettings
from e2e.infra import Running
from e2e.infra import kafka as kafka_server
from e2e.sink import RecordingSink
from tests.conftest import require_server
from tests.integration.test_dev_node import dev_settings
from tests.integration.test_kafka_target import consume

SLOTS = 4
HOLD_S = 8.0


@pytest.fixture
async def slow_sink() -> AsyncIterator[RecordingSink]:
    receiver = await RecordingSink(delay_s=HOLD_S).start()
    yield receiver
    await receiver.stop()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def node_settings(tmp_path: Path, share: float) -> ProcessSettings:
    """An embedded node whose worker has SLOTS delivery slots, `share` per tenant."""
    settings = dev_settings(tmp_path)
    worker = dataclasses.replace(
        settings.worker, max_concurrent_deliveries=SLOTS, max_tenant_share=share
    )
    return dataclasses.replace(settings, worker=worker)


def spec(url: str, due_ms: int) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(due_ms), HttpTarget(url), b"{}")


@pytest.mark.parametrize(("share", "isolated"), [(0.5, True), (1.0, False)])
async def test_a_slow_tenant_ties_up_only_its_share_of_the_slots(
    tmp_path: Path, sink: RecordingSink, slow_sink: RecordingSink, share: float, isolated: bool
) -> None:
    async with app.running(node_settings(tmp_path, share), api=True, worker=True) as node:
        assert node.api is not None
        address = f"127.0.0.1:{node.api.port}"
        slow = ClockworkClient(ClientSettings(server=address, tenant="slow"))
        fast = ClockworkClient(ClientSettings(server=address, tenant="fast"))
        async with slow, fast:
            due = now_ms() + 1500
            for i in range(2 * SLOTS):  # enough to fill every slot, held HOLD_S each
                await slow.create(f"s-{i}", spec(slow_sink.url + "/slow", due))
            # Due once the slow tenant's deliveries hold their slots.
            lag_ms = await other_tenant_lag(fast, sink, due + 1000, HOLD_S)
    print(f"share {share}: the other tenant's worst lag {lag_ms} ms")
    assert_isolation(lag_ms, HOLD_S, isolated)


async def other_tenant_lag(
    client: ClockworkClient, sink: RecordingSink, due_ms: int, hold_s: float
) -> int:
    """SLOTS firings of the other tenant, due at `due_ms`: their worst lag (ms)."""
    for i in range(SLOTS):
        await client.create(f"f-{i}", spec(sink.url + "/fast", due_ms))
    got = await sink.wait_for("/fast", SLOTS, timeout_s=4 * hold_s)
    return max(r.received_ms for r in got) - due_ms


def assert_isolation(lag_ms: int, hold_s: float, isolated: bool) -> None:
    if isolated:
        # Its firings found free slots: nowhere near the slow tenant's hold.
        assert lag_ms < hold_s * 1000 / 2
    else:
        # Every slot was held by the slow tenant until its deliveries ended.
        assert lag_ms > hold_s * 1000 / 2


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A broker of this module's own, so stopping it disturbs no other test."""
    require_server("CLOCKWORK_KAFKA")  # the harness fetched Kafka
    broker = kafka_server.start(tmp_path_factory.mktemp("kafka") / "infra")
    try:
        yield broker
    finally:
        broker.destroy()


@contextlib.contextmanager
def hung(pid: int) -> Iterator[None]:
    """SIGSTOP `pid` (a broker that accepts nothing and answers nothing) until exit."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.kafka
@pytest.mark.parametrize(("share", "isolated"), [(0.5, True), (1.0, False)])
async def test_a_hung_kafka_broker_ties_up_only_its_tenants_share(
    tmp_path: Path, sink: RecordingSink, own_kafka: Running, share: float, isolated: bool
) -> None:
    """A tenant producing to a broker that hangs holds a delivery slot per send until
    the send times out (15 s); another tenant's HTTP firings, due meanwhile, go out on
    time when the share bounds it, and starve when it does not. Once the broker runs
    again, every Kafka firing arrives (the retries cover the outage)."""
    settings = dataclasses.replace(node_settings(tmp_path, share), kafka=own_kafka.address)
    topic = "hung-" + uuid.uuid4().hex[:8]
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=20, initial_delay_ms=500)
    async with app.running(settings, api=True, worker=True) as node:
        assert node.api is not None
        address = f"127.0.0.1:{node.api.port}"
        producer = ClockworkClient(ClientSettings(server=address, tenant="producer"))
        fast = ClockworkClient(ClientSettings(server=address, tenant="fast"))
        async with producer, fast:
            # The producer connects and learns the topic's leader before the broker hangs.
            first = ScheduleSpec(triggers.OnceTrigger(now_ms()), KafkaTarget(topic), b"{}")
            await producer.create("k-warm", first)
            assert len(await consume(topic, 1, 30, own_kafka.address)) == 1
            with hung(own_kafka.pid):
                due = now_ms() + 1500
                for i in range(2 * SLOTS):
                    kafka = KafkaTarget(topic)
                    trigger = triggers.OnceTrigger(due)
                    await producer.create(f"k-{i}", ScheduleSpec(trigger, kafka, b"{}", retry))
                # Due once the hung sends hold their slots.
                lag_ms = await other_tenant_lag(fast, sink, due + 1000, SEND_TIMEOUT_S)
            ids = await delivered_ids(topic, 2 * SLOTS + 1, 90, own_kafka.address)
    print(f"share {share}: the HTTP tenant's worst lag {lag_ms} ms beside a hung broker")
    assert_isolation(lag_ms, SEND_TIMEOUT_S, isolated)
    assert len(ids) == 2 * SLOTS + 1, f"{len(ids)} distinct of {2 * SLOTS + 1}"


async def delivered_ids(topic: str, want: int, timeout_s: float, bootstrap: str) -> set[bytes]:
    """The distinct delivery ids (webhook-id) on `topic`, read until `want` of them
    (a retried send may have landed twice) or the timeout."""
    deadline = time.monotonic() + timeout_s
    ids: set[bytes] = set()
    count = want
    while len(ids) < want and time.monotonic() < deadline:
        records = await consume(topic, count, deadline - time.monotonic(), bootstrap)
        ids = {dict(r.headers)["webhook-id"] for r in records}  # type: ignore[attr-defined]
        count = len(records) + 1
    return ids
