"""`--etcd` as one gRPC target naming every member, and the failover that buys."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from aetcd import rpc

from clockwork_svc.coordination import etcd
from clockwork_svc.coordination.endpoints import grpc_target

READY = grpc.ChannelConnectivity.READY


@pytest.mark.parametrize(
    ("endpoints", "target"),
    [
        ("127.0.0.1:2379", "127.0.0.1:2379"),
        ("127.0.0.1", "127.0.0.1:2379"),
        (
            "10.0.0.1:2379,10.0.0.2:2380, 10.0.0.3",
            "ipv4:10.0.0.1:2379,10.0.0.2:2380,10.0.0.3:2379",
        ),
        ("[::1]:2379", "[::1]:2379"),
        ("[fd00::1]:2379,[fd00:0::2]", "ipv6:[fd00::1]:2379,[fd00::2]:2379"),
        ("etcd.ns.svc:2379", "dns:///etcd.ns.svc:2379"),
        ("etcd", "dns:///etcd:2379"),
    ],
)
def test_members_become_one_target(endpoints: str, target: str) -> None:
    assert grpc_target(endpoints) == target


def test_a_new_session_starts_on_the_next_member() -> None:
    members = "10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379"
    assert grpc_target(members, 1) == "ipv4:10.0.0.2:2379,10.0.0.3:2379,10.0.0.1:2379"
    assert grpc_target(members, 5) == "ipv4:10.0.0.3:2379,10.0.0.1:2379,10.0.0.2:2379"
    assert grpc_target(members, 3) == grpc_target(members)
    assert grpc_target("etcd.db.svc:2379", 2) == "dns:///etcd.db.svc:2379"


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        ("a.svc:2379,b.svc:2379", "one name that resolves to every member"),
        ("10.0.0.1:2379,etcd:2379", "a DNS name ('etcd') must be the only entry"),
        ("10.0.0.1,[fd00::1]", "mixes IPv4 and IPv6"),
        ("", "entry 1 is empty"),
        ("10.0.0.1,,10.0.0.2", "entry 2 is empty"),
        ("10.0.0.1:2379,10.0.0.2:x", "'10.0.0.2:x' is not HOST:PORT"),
        ("10.0.0.1:0", "'10.0.0.1:0' is not HOST:PORT"),
        ("10.0.0.1:65536", "'10.0.0.1:65536' is not HOST:PORT"),
        ("fd00::1", "write an IPv6 address as [ADDRESS]:PORT"),
        ("[10.0.0.1]:2379", "only IPv6 addresses take brackets"),
        (":2379", "':2379' is not HOST:PORT"),
        ("etcd/x:2379", "'etcd/x:2379' is not HOST:PORT"),
    ],
)
def test_bad_members_are_refused_naming_the_entry(endpoints: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        grpc_target(endpoints)


class Member:
    """An in-process stand-in for one etcd member: every Range answers with its name."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "etcdserverpb.KV",
                    {
                        "Range": grpc.unary_unary_rpc_method_handler(
                            self.range,
                            request_deserializer=rpc.RangeRequest.FromString,
                            response_serializer=rpc.RangeResponse.SerializeToString,
                        )
                    },
                )
            ]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def range(self, request: Any, _context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return rpc.RangeResponse(count=1, kvs=[rpc.KeyValue(key=request.key, value=self.name)])


@pytest.fixture
async def members() -> AsyncIterator[list[Member]]:
    started = [Member(b"first"), Member(b"second")]
    for member in started:
        await member.server.start()
    yield started
    for member in started:
        await member.server.stop(None)


async def test_calls_fail_over_to_another_member(members: list[Member]) -> None:
    first, second = members
    client = await etcd.connect(f"127.0.0.1:{first.port},127.0.0.1:{second.port}")
    try:
        # pick_first: the members in the order given, the first one that answers.
        assert (await client.get(b"k")).value == b"first"
        await first.server.stop(None)
        # A call sent before the channel has seen the member go fails with it ("Stream
        # removed", on a loaded machine); what follows must go to the second member.
        await asyncio.wait_for(client.channel.wait_for_state_change(READY), 5)
        # The same client, not reconnected: the channel has moved to the second member.
        assert (await client.get(b"k")).value == b"second"
    finally:
        await client.close()
