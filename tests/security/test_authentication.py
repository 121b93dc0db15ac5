"""Every RPC of every service refuses a missing or wrong credential, and tenant
credentials cannot reach the admin services. The RPCs come from the descriptors, so a
new one is covered without editing this file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor

from clockwork_svc import app
from tests.fuzz.harness import METHODS, path_of
from tests.security.conftest import ADMIN, client_for

ADMIN_SERVICES = {"clockwork.api.v1.TenantService", "clockwork.api.v1.ClusterService"}
BAD_CREDENTIALS = {
    "none": (),
    "wrong-token": (("authorization", "Bearer wrong-token-0123456789abcdef"),),
    "empty-bearer": (("authorization", "Bearer "),),
    "basic-scheme": (("authorization", f"Basic {ADMIN}"),),
    "token-without-scheme": (("authorization", ADMIN),),
    "admin-token-prefix": (("authorization", f"Bearer {ADMIN[:-1]}"),),
}


@pytest.fixture
async def channel(node: app.Node) -> AsyncIterator[grpc.aio.Channel]:
    assert node.api is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.api.port}") as ch:
        yield ch


async def call(
    channel: grpc.aio.Channel, method: MethodDescriptor, metadata: tuple[tuple[str, str], ...]
) -> grpc.StatusCode:
    # An empty body is a valid instance of every request message.
    stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        path_of(method), request_serializer=None, response_deserializer=None
    )
    try:
        await stub(b"", metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_every_service_is_covered() -> None:
    services = {m.containing_service.full_name for m in METHODS}
    assert services == {"clockwork.api.v1.SchedulerService", *ADMIN_SERVICES}
    assert len(METHODS) >= 22


@pytest.mark.parametrize("credential", sorted(BAD_CREDENTIALS))
async def test_every_rpc_needs_a_valid_token(channel: grpc.aio.Channel, credential: str) -> None:
    metadata = BAD_CREDENTIALS[credential]
    codes = {m.full_name: await call(channel, m, metadata) for m in METHODS}
    assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes


async def test_revoked_and_spoofing_tokens_are_unauthenticated_everywhere(
    node: app.Node, channel: grpc.aio.Channel
) -> None:
    async with client_for(node, ADMIN) as admin:
        a = await admin.create_tenant("tenant-a")
        await admin.create_tenant("tenant-b")
    # A tenant token naming another tenant is refused on every RPC.
    spoof = (("authorization", f"Bearer {a.token}"), ("clockwork-tenant", "tenant-b"))
    codes = {m.full_name: await call(channel, m, spoof) for m in METHODS}
    assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes
    async with client_for(node, ADMIN) as admin:
        await admin.revoke_tokens("tenant-a")
    await asyncio.sleep(0.5)  # past the api's token cache
    revoked = (("authorization", f"Bearer {a.token}"),)
    codes = {m.full_name: await call(channel, m, revoked) for m in METHODS}
    assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes


async def test_a_tenant_token_cannot_call_the_admin_services(
    node: app.Node, channel: grpc.aio.Channel
) -> None:
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("plain")
    tenant = (("authorization", f"Bearer {created.token}"),)
    admin_methods = [m for m in METHODS if m.containing_service.full_name in ADMIN_SERVICES]
    assert len(admin_methods) >= 11
    codes = {m.full_name: await call(channel, m, tenant) for m in admin_methods}
    assert set(codes.values()) == {grpc.StatusCode.PERMISSION_DENIED}, codes
    # ...while the same token works on the scheduling API, and the admin token on these.
    scheduler = [m for m in METHODS if m.name == "ListSchedules"]
    assert await call(channel, scheduler[0], tenant) is grpc.StatusCode.OK
    get_load = [m for m in METHODS if m.name == "GetClusterLoad"]
    admin_md = (("authorization", f"Bearer {ADMIN}"),)
    assert await call(channel, get_load[0], admin_md) is grpc.StatusCode.OK
