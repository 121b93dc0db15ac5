from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest

from clockwork_svc.delivery.http import HttpSink, classify
from clockwork_svc.domain.model import MAX_RESPONSE_CAPTURE_BYTES, Firing
from clockwork_svc.domain.netpolicy import AddressPolicy, parse_networks
from clockwork_svc.domain.spec import HttpTarget
from tests.support.sink import RecordingSink

FIRING = Firing(
    shard=0,
    fire_at_ms=0,
    firing_id="f",
    tenant="t",
    schedule_key="k",
    schedule_id="s",
    version=1,
    seq=0,
    occurrence_ms=0,
    attempt=1,
    delivery_id="msg_abc",
)


@pytest.fixture
async def receiver() -> AsyncIterator[RecordingSink]:
    sink = await RecordingSink().start()
    yield sink
    await sink.stop()


@pytest.mark.parametrize(
    ("status", "ok", "retryable"),
    [
        (200, True, False),
        (204, True, False),
        (301, False, False),
        (302, False, False),
        (400, False, False),
        (404, False, False),
        (410, False, False),
        (408, False, True),
        (429, False, True),
        (500, False, True),
        (503, False, True),
    ],
)
def test_classify(status: int, ok: bool, retryable: bool) -> None:
    result = classify(status, {}, b"", 0)
    assert (result.ok, result.retryable, result.status_code) == (ok, retryable, status)


def test_retry_after_seconds_and_date() -> None:
    assert classify(503, {"Retry-After": "7"}, b"", 0).retry_after_ms == 7000
    date = classify(429, {"Retry-After": "Thu, 01 Jan 1970 00:01:40 GMT"}, b"", 40)
    assert date.retry_after_ms == 60_000
    assert classify(503, {"Retry-After": "soon"}, b"", 0).retry_after_ms is None


def test_policy_blocks_private_and_special_addresses() -> None:
    strict = AddressPolicy()
    for text in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "fd00::1",
        "0.0.0.0",
        "224.0.0.1",
    ]:
        assert not strict.permits(ipaddress.ip_address(text)), text
    assert strict.permits(ipaddress.ip_address("93.184.216.34"))
    allowed = AddressPolicy(allowed_networks=parse_networks("10.0.0.0/8"))
    assert allowed.permits(ipaddress.ip_address("10.9.9.9"))
    assert AddressPolicy(allow_loopback=True).permits(ipaddress.ip_address("127.0.0.1"))


async def test_delivers_with_headers(receiver: RecordingSink) -> None:
    sink = HttpSink(AddressPolicy(allow_loopback=True))
    try:
        target = HttpTarget(receiver.url + "/hook", "PUT", (("X-Custom", "1"),))
        result = await sink.deliver(target, b'{"a":1}', FIRING, 1234)
    finally:
        await sink.close()
    assert result.ok
    [got] = receiver.received
    assert got.delivery_id == "msg_abc" and got.timestamp == "1234"
    assert got.headers["X-Custom"] == "1" and got.body == b'{"a":1}'


async def test_loopback_is_refused_unless_allowed(receiver: RecordingSink) -> None:
    sink = HttpSink(AddressPolicy())
    try:
        literal = await sink.deliver(HttpTarget(receiver.url), b"", FIRING, 0)
        by_name = await sink.deliver(
            HttpTarget(f"http://localhost:{receiver.port}/"), b"", FIRING, 0
        )
        decimal = await sink.deliver(
            HttpTarget(f"http://2130706433:{receiver.port}/"), b"", FIRING, 0
        )
    finally:
        await sink.close()
    for result in (literal, by_name, decimal):
        assert not result.ok and not result.retryable, result
    assert receiver.received == []


async def test_redirects_are_not_followed(receiver: RecordingSink) -> None:
    receiver.responder = lambda path, n: (302, {"Location": "http://169.254.169.254/"})
    sink = HttpSink(AddressPolicy(allow_loopback=True))
    try:
        result = await sink.deliver(HttpTarget(receiver.url), b"", FIRING, 0)
    finally:
        await sink.close()
    assert not result.ok and result.status_code == 302 and not result.retryable
    assert len(receiver.received) == 1


async def test_connection_refused_and_timeout_are_retryable(receiver: RecordingSink) -> None:
    receiver.delay_s = 2.0
    sink = HttpSink(AddressPolicy(allow_loopback=True))
    try:
        refused = await sink.deliver(HttpTarget("http://127.0.0.1:1/"), b"", FIRING, 0)
        slow = await sink.deliver(HttpTarget(receiver.url, timeout_ms=300), b"", FIRING, 0)
    finally:
        await sink.close()
    assert not refused.ok and refused.retryable
    assert not slow.ok and slow.retryable and "timed out" in slow.error


def test_410_asks_to_stop_the_schedule() -> None:
    gone = classify(410, {}, b"bye", 0)
    assert (gone.ok, gone.retryable, gone.stop_schedule) == (False, False, True)
    assert not classify(404, {}, b"", 0).stop_schedule


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
        "10.0.0.1",
        "100.64.0.1",
        "localhost",
        "0.0.0.0",
    ],
)
async def test_ssrf_matrix_fails_permanently_without_connecting(
    receiver: RecordingSink, host: str
) -> None:
    sink = HttpSink(AddressPolicy())
    try:
        result = await sink.deliver(HttpTarget(f"http://{host}:{receiver.port}/"), b"", FIRING, 0)
    finally:
        await sink.close()
    assert not result.ok and not result.retryable, result
    assert receiver.received == []


async def test_allow_list_admits_a_listed_private_network(receiver: RecordingSink) -> None:
    sink = HttpSink(AddressPolicy(allowed_networks=parse_networks("127.0.0.0/8")))
    try:
        result = await sink.deliver(HttpTarget(receiver.url), b"", FIRING, 0)
    finally:
        await sink.close()
    assert result.ok and len(receiver.received) == 1


async def test_the_response_body_and_selected_headers_are_captured(
    receiver: RecordingSink,
) -> None:
    body = b"x" * (MAX_RESPONSE_CAPTURE_BYTES + 100)
    headers = {"X-Request-Id": "req-7", "Content-Type": "text/plain", "X-Secret": "s"}
    receiver.responder = lambda path, n: (201, headers, body if path == "/big" else b"created")
    sink = HttpSink(AddressPolicy(allow_loopback=True))
    try:
        small = await sink.deliver(HttpTarget(receiver.url + "/small"), b"{}", FIRING, 1)
        big = await sink.deliver(HttpTarget(receiver.url + "/big"), b"{}", FIRING, 1)
    finally:
        await sink.close()
    assert small.ok and small.response_body == b"created"
    captured = dict(small.response_headers)
    assert captured["X-Request-Id"] == "req-7" and captured["Content-Type"] == "text/plain"
    assert "X-Secret" not in captured
    assert big.response_body == body[:MAX_RESPONSE_CAPTURE_BYTES]
