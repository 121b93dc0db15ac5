"""Requests larger than the api's message limit are refused with RESOURCE_EXHAUSTED
before any handler (or the auth check) sees them; just under the limit they reach the
handler."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from clockwork_svc import app
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.server.grpc_server import MAX_MESSAGE_BYTES
from tests.integration.test_dev_node import dev_settings
from tests.security.conftest import ADMIN, client_for
from tests.support.processes import run_cli

CREATE = "/clockwork.api.v1.SchedulerService/CreateSchedule"


@pytest.fixture
async def channel(node: app.Node) -> AsyncIterator[grpc.aio.Channel]:
    assert node.api is not None
    options = [("grpc.max_send_message_length", 4 * MAX_MESSAGE_BYTES)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.api.port}", options=options) as ch:
        yield ch


def create_request(payload_bytes: int) -> bytes:
    spec = pb.ScheduleSpec(
        http=pb.HttpTarget(url="https://example.com/"), payload=b"x" * payload_bytes
    )
    spec.once.at.FromSeconds(4_000_000_000)
    return pb.CreateScheduleRequest(key="big", spec=spec).SerializeToString()


async def send(
    channel: grpc.aio.Channel, body: bytes, metadata: tuple[tuple[str, str], ...]
) -> grpc.aio.AioRpcError:
    stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        CREATE, request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(body, metadata=metadata, timeout=20)
    return err.value


async def test_oversized_requests_are_resource_exhausted(
    node: app.Node, channel: grpc.aio.Channel
) -> None:
    async with client_for(node, ADMIN) as admin:
        tenant = await admin.create_tenant("big")
    auth = (("authorization", f"Bearer {tenant.token}"),)
    over = create_request(MAX_MESSAGE_BYTES + 1)
    assert len(over) > MAX_MESSAGE_BYTES
    for metadata in (auth, ()):  # also without a token: the size check comes first
        err = await send(channel, over, metadata)
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    # Just under the limit the request reaches validation (the payload limit is 64 KiB).
    under = create_request(MAX_MESSAGE_BYTES - 1024)
    assert len(under) <= MAX_MESSAGE_BYTES
    err = await send(channel, under, auth)
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert (err.details() or "").startswith("spec.payload: "), err.details()


@pytest.fixture
async def small_node(tmp_path: Path) -> AsyncIterator[app.Node]:
    """An api started with `--max-message-size` 256 KiB."""
    base = dev_settings(tmp_path)
    settings = dataclasses.replace(
        base,
        api=dataclasses.replace(
            base.api,
            auth=AuthSettings.from_pairs("", admin_token=ADMIN),
            max_message_bytes=SMALL_LIMIT,
        ),
    )
    async with app.running(settings, api=True, worker=True) as running:
        yield running


SMALL_LIMIT = 256 * 1024


async def test_the_message_limit_is_configurable(small_node: app.Node) -> None:
    assert small_node.api is not None
    options = [("grpc.max_send_message_length", 4 * MAX_MESSAGE_BYTES)]
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{small_node.api.port}", options=options) as ch,
        client_for(small_node, ADMIN) as admin,
    ):
        tenant = await admin.create_tenant("small")
        auth = (("authorization", f"Bearer {tenant.token}"),)
        err = await send(ch, create_request(SMALL_LIMIT + 1), auth)
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
        err = await send(ch, create_request(SMALL_LIMIT - 1024), auth)
        assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()


async def test_a_message_limit_below_the_payload_limit_is_refused_naming_the_flag() -> None:
    code, _, err = await run_cli("api", "--max-payload", "1048576", "--max-message-size", "1048576")
    assert code == 2, err
    assert "--max-message-size" in err and "--max-payload" in err, err
