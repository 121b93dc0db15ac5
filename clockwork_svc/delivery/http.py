"""HTTP callback delivery (the only module that imports the aiohttp client).

One pooled ClientSession per worker. Redirects are never followed. Every address
connected to passes the AddressPolicy: literal IPs are checked before the request,
names through a resolver that filters what DNS returns, so the address checked is
the address used.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from clockwork_svc.domain import signing
from clockwork_svc.domain.model import (
    CAPTURED_HEADERS,
    MAX_RESPONSE_CAPTURE_BYTES,
    DeliveryResult,
    Firing,
)
from clockwork_svc.domain.netpolicy import AddressPolicy, literal_address
from clockwork_svc.domain.spec import HttpTarget

USER_AGENT = "Clockwork/0.1 (+https://github.com/clockwork-scheduler)"
MAX_ERROR_BODY = 512


class BlockedAddress(OSError):
    """The target resolved only to addresses the policy forbids."""


class GuardedResolver(AbstractResolver):
    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results if self._permits(r["host"])]
        if not allowed:
            raise BlockedAddress(f"{host} resolves only to addresses callbacks may not reach")
        return allowed

    def _permits(self, host: str) -> bool:
        address = literal_address(host)
        return address is not None and self._policy.permits(address)

    async def close(self) -> None:
        await self._inner.close()


class HttpSink:
    """Delivers to HTTP targets (see delivery/routing.py for the DeliverySink)."""

    def __init__(self, policy: AddressPolicy, max_connections: int = 1000) -> None:
        self._policy = policy
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=0,
                resolver=GuardedResolver(self._policy),
                ttl_dns_cache=10,
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def deliver(
        self,
        target: HttpTarget,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        traceparent: str = "",
    ) -> DeliveryResult:
        url = URL(target.url, encoded=False)
        address = literal_address(url.host or "")
        if address is not None and not self._policy.permits(address):
            return DeliveryResult(False, False, error=f"target address {address} is not allowed")
        headers = {name: value for name, value in target.headers}
        headers.setdefault("Content-Type", _content_type(payload))
        headers.update(
            signing.webhook_headers(firing.delivery_id, timestamp_s, payload, signing_secrets)
        )
        if traceparent:
            headers["traceparent"] = traceparent
        timeout = aiohttp.ClientTimeout(total=target.effective_timeout_ms / 1000)
        try:
            async with self._client().request(
                target.method,
                url,
                data=payload,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                body = await _read_up_to(response.content, MAX_RESPONSE_CAPTURE_BYTES)
                result = classify(response.status, response.headers, body, timestamp_s)
                captured = tuple(
                    (name, response.headers[name])
                    for name in CAPTURED_HEADERS
                    if name in response.headers
                )
                return dataclasses.replace(result, response_body=body, response_headers=captured)
        except BlockedAddress as exc:
            return DeliveryResult(False, False, error=str(exc))
        except aiohttp.InvalidURL as exc:
            return DeliveryResult(False, False, error=f"invalid URL: {exc}"[:512])
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                return DeliveryResult(False, False, error=str(exc.os_error))
            return DeliveryResult(False, True, error=f"connection failed: {exc}"[:512])
        except TimeoutError:
            return DeliveryResult(False, True, error="timed out")
        except aiohttp.ClientError as exc:
            return DeliveryResult(False, True, error=f"{type(exc).__name__}: {exc}"[:512])
        except OSError as exc:
            return DeliveryResult(False, True, error=f"connection failed: {exc}"[:512])


async def _read_up_to(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body's first `limit` bytes (one read may return fewer than it could)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _content_type(payload: bytes) -> str:
    if not payload:
        return "application/octet-stream"
    try:
        json.loads(payload)
    except ValueError:
        return "application/octet-stream"
    return "application/json"


def classify(status: int, headers: Any, body: bytes, now_s: int) -> DeliveryResult:
    """Map an HTTP response to a delivery result (2xx ok; 429/503/5xx/408 retryable)."""
    if 200 <= status < 300:
        return DeliveryResult(True, False, status)
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
    if 300 <= status < 400:
        return DeliveryResult(False, False, status, f"redirect not followed: {status}")
    if status == 410:
        return DeliveryResult(False, False, status, f"HTTP 410 Gone: {text}", stop_schedule=True)
    retry_after = _retry_after_ms(headers.get("Retry-After"), now_s)
    retryable = status >= 500 or status in (408, 425, 429)
    return DeliveryResult(False, retryable, status, f"HTTP {status}: {text}", retry_after)


def _retry_after_ms(value: str | None, now_s: int) -> int | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value), 86_400) * 1000
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0, min(int((when - now_s) * 1000), 86_400_000))
