"""SSRF vectors beyond the matrix in tests/unit/delivery/test_http_sink.py, at the same
level (AddressPolicy and HttpSink.deliver under the default, strict policy): IPv6
unique-local and link-local, the IPv4-mapped metadata address, and a DNS name that
resolves to a private address."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.abc import ResolveResult

from clockwork_svc.delivery.http import HttpSink
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget
from tests.support.sink import RecordingSink
from tests.unit.delivery.test_http_sink import FIRING

BLOCKED_LITERALS = [
    "fc00::1",  # unique local (fc00::/7), both halves
    "fd12:3456:789a::1",
    "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "fe80::1",  # link local (fe80::/10)
    "febf::1",
    "::ffff:a9fe:a9fe",  # 169.254.169.254, IPv4-mapped
    "::ffff:10.0.0.1",
    "::ffff:192.168.0.1",
    "::",
    "ff02::1",  # multicast
]


@pytest.fixture
async def receiver() -> AsyncIterator[RecordingSink]:
    sink = await RecordingSink().start()
    yield sink
    await sink.stop()


@pytest.mark.parametrize("text", BLOCKED_LITERALS)
def test_policy_blocks_ipv6_private_link_local_and_mapped(text: str) -> None:
    assert not AddressPolicy().permits(ipaddress.ip_address(text))


@pytest.mark.parametrize(
    "host",
    [
        "[fc00::1]",
        "[fd00::1]",
        "[fe80::1]",
        "[::ffff:a9fe:a9fe]",
        "[::ffff:169.254.169.254]",
        "0177.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
    ],
)
async def test_sink_refuses_without_connecting(receiver: RecordingSink, host: str) -> None:
    sink = HttpSink(AddressPolicy())
    try:
        result = await sink.deliver(HttpTarget(f"http://{host}:{receiver.port}/"), b"", FIRING, 0)
    finally:
        await sink.close()
    assert not result.ok and not result.retryable, result
    assert receiver.received == []


def _resolving_to(addresses: list[str]) -> object:
    async def resolve(
        self: object, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in addresses
        ]

    return resolve


@pytest.mark.parametrize(
    "addresses",
    [["10.1.2.3"], ["169.254.169.254"], ["fd00::5"], ["127.0.0.1"], ["192.168.1.1", "fe80::1"]],
)
async def test_a_name_resolving_to_a_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, receiver: RecordingSink, addresses: list[str]
) -> None:
    # DNS answers are replaced (the system resolver would need a zone we control); the
    # sink's own guard must filter them before any connection.
    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", _resolving_to(addresses))
    sink = HttpSink(AddressPolicy())
    try:
        result = await sink.deliver(
            HttpTarget(f"http://internal.example.test:{receiver.port}/"), b"", FIRING, 0
        )
    finally:
        await sink.close()
    assert not result.ok and not result.retryable, result
    assert "may not reach" in result.error, result
    assert receiver.received == []


async def test_a_name_with_one_allowed_address_connects_only_there(
    monkeypatch: pytest.MonkeyPatch, receiver: RecordingSink
) -> None:
    # 10.x first, then loopback (allowed here): the guard drops 10.x, so the request
    # reaches the receiver on loopback; proves the filter keeps what the policy allows.
    monkeypatch.setattr(
        aiohttp.ThreadedResolver, "resolve", _resolving_to(["10.9.9.9", "127.0.0.1"])
    )
    sink = HttpSink(AddressPolicy(allow_loopback=True))
    try:
        result = await sink.deliver(
            HttpTarget(f"http://mixed.example.test:{receiver.port}/"), b"", FIRING, 0
        )
    finally:
        await sink.close()
    assert result.ok, result
    assert len(receiver.received) == 1
