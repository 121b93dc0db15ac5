"""The api under a burst far beyond what it serves: every call gets its answer or a
clean refusal (UNAVAILABLE with a retry hint), never CANCELLED; a refused call did
nothing; health keeps answering; and the typed client, retrying refusals, creates
every schedule exactly once. Against the real api on the embedded store."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clockwork_svc import app
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.server.admission import PUSHBACK_METADATA
from clockwork_svc.server.auth import TENANT_METADATA
from tests.integration.test_dev_node import dev_settings

MAX_IN_FLIGHT = 8
TENANT = ((TENANT_METADATA, "acme"),)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[app.Node]:
    settings = dev_settings(tmp_path)
    settings = dataclasses.replace(
        settings, api=dataclasses.replace(settings.api, max_in_flight=MAX_IN_FLIGHT)
    )
    async with app.running(settings, api=True, worker=False) as running:
        yield running


def far_spec() -> pb.ScheduleSpec:
    due = time.time_ns() // 1_000_000 + 86_400_000
    return convert.spec_to_pb(
        ScheduleSpec(triggers.OnceTrigger(due), HttpTarget("http://127.0.0.1:9/x"), b"{}")
    )


async def test_a_burst_gets_answers_or_hinted_refusals_never_cancelled(node: app.Node) -> None:
    # 5,000 calls at once on four connections, 600 times what the api admits at once:
    # unbounded, gRPC core would queue them all and drop those past 1,000 as CANCELLED.
    assert node.api is not None
    address = f"127.0.0.1:{node.api.port}"
    # Each channel with a connection of its own (by default they would share one).
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, own) for _ in range(4)]
    stubs = [pb_grpc.SchedulerServiceStub(c) for c in channels]
    health = health_pb2_grpc.HealthStub(channels[0])
    spec, invalid = far_spec(), pb.ScheduleSpec()
    codes: collections.Counter[str] = collections.Counter()
    created: set[str] = set()
    refused: set[str] = set()
    hints: list[int] = []

    async def one(i: int) -> None:
        key = f"burst-{i}"
        request = pb.CreateScheduleRequest(key=key, spec=invalid if i % 10 == 0 else spec)
        try:
            await stubs[i % 4].CreateSchedule(request, metadata=TENANT, timeout=60)
            created.add(key)
            codes["OK"] += 1
        except grpc.aio.AioRpcError as exc:
            codes[exc.code().name] += 1
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                refused.add(key)
                pushback = dict(exc.trailing_metadata() or ())
                hints.append(int(pushback.get(PUSHBACK_METADATA, -1)))

    async def health_checks() -> list[int]:
        answers = []
        for _ in range(5):
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            answers.append(reply.status)
        return answers

    try:
        burst = asyncio.gather(*(one(i) for i in range(5000)))
        answers = await health_checks()
        await burst
        assert set(codes) <= {"OK", "INVALID_ARGUMENT", "UNAVAILABLE"}, codes
        assert codes["UNAVAILABLE"] > 0 and codes["OK"] > 0, codes
        assert codes["INVALID_ARGUMENT"] + codes["UNAVAILABLE"] + codes["OK"] == 5000
        assert all(20 <= hint <= 5000 for hint in hints), sorted(set(hints))
        assert answers == [health_pb2.HealthCheckResponse.SERVING] * 5
        # A refused call did nothing; an answered one did what it said.
        assert node.metrics.api_refused._value.get() == len(refused)
        settings = ClientSettings(server=address, tenant="acme")
        async with ClockworkClient(settings) as client:
            stored = {s.key async for s in client.list_all()}
        assert stored == created
        assert not stored & refused
    finally:
        for channel in channels:
            await channel.close()


async def test_the_typed_client_retries_refusals_until_every_create_lands(
    node: app.Node,
) -> None:
    # Two clients: one connection alone has at most MAX_IN_FLIGHT calls open (HTTP/2
    # flow control), so it is held back rather than refused.
    assert node.api is not None
    settings = ClientSettings(server=f"127.0.0.1:{node.api.port}", tenant="acme", timeout_s=120)
    spec = far_spec()
    async with ClockworkClient(settings) as one, ClockworkClient(settings) as other:
        clients = (one, other)
        results = await asyncio.gather(
            *(clients[i % 2].create(f"k-{i}", spec) for i in range(1500))
        )
        assert node.metrics.api_refused._value.get() > 0  # the burst was refused in part
        # Every create ran once: none found its schedule made by an earlier attempt.
        assert all(r.created for r in results)
        stored = [s.key async for s in one.list_all()]
    assert sorted(stored) == sorted(f"k-{i}" for i in range(1500))
