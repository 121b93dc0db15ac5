"""A recording HTTP callback receiver (a real server on loopback) for tests and the soak.

It logs every request (delivery id, attempt headers, body, receive time, and the status
it answered) and answers with programmable responses: a status per (path, n-th request),
or a delay. A fault can be switched on at run time, for every request until healed:

    sink.fail_with(503)     # answer an error status
    sink.hang()             # never answer (the client times out); see HUNG
    sink.reset()            # close the connection without an answer (RESET)
    sink.heal()             # back to the responder

The status recorded with each request is what the sink decided to answer: RESET for a
reset connection, HUNG for a request it never answered. The checker counts only 2xx
answers as deliveries.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

RESET = -1
"""Responder value and recorded status: the connection was closed without an answer."""
HUNG = 0
"""Recorded status: the sink held the request without ever answering."""
_HANG_LIMIT_S = 3600.0


Answer = int | tuple[int, dict[str, str]] | tuple[int, dict[str, str], bytes]
"""What a responder answers a request with: a status, with headers, with a body
(default b"ok")."""


def _parts(answer: Answer) -> tuple[int, dict[str, str], bytes]:
    if isinstance(answer, int):
        return answer, {}, b"ok"
    if len(answer) == 2:
        return answer[0], answer[1], b"ok"
    return answer


@dataclass(frozen=True)
class Received:
    path: str
    delivery_id: str
    timestamp: str
    headers: dict[str, str]
    body: bytes
    received_ms: int
    status: int = 200
    """What the sink answered: an HTTP status, RESET or HUNG."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class RecordingSink:
    received: list[Received] = field(default_factory=list)
    # (path, n-th request to that path, 1-based) -> status; default 200. RESET closes the
    # connection without an answer (a connection reset, as a crashing server does).
    responder: Callable[[str, int], Answer] = lambda path, n: 200
    delay_s: float = 0.0
    port: int = 0
    host: str = "127.0.0.1"
    """Where it listens (pods on the real node reach the host at the pod gateway)."""
    _runner: web.AppRunner | None = None
    _counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _arrived: asyncio.Condition | None = None
    # The run-time fault: None (use the responder), an error status, RESET or HUNG.
    _fault: int | None = None
    _healed: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> RecordingSink:
        self._arrived = asyncio.Condition()
        self._healed = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.heal()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- run-time faults ----------------------------------------------------------------

    def fail_with(self, status: int = 503) -> None:
        """Answer every request with `status` until healed."""
        self._set_fault(status)

    def hang(self) -> None:
        """Hold every request without answering until healed (then drop the connection)."""
        self._set_fault(HUNG)

    def reset(self) -> None:
        """Close every request's connection without an answer until healed."""
        self._set_fault(RESET)

    def heal(self) -> None:
        """Answer through the responder again; requests held by hang() are dropped."""
        self._fault = None
        if self._healed is not None:
            self._healed.set()

    @property
    def fault(self) -> int | None:
        return self._fault

    def _set_fault(self, fault: int) -> None:
        self._fault = fault
        if self._healed is not None:
            self._healed.clear()

    # --- serving -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        now = time.time_ns() // 1_000_000
        self._counts[request.path] += 1
        n = self._counts[request.path]
        fault = self._fault
        answer: Answer = fault if fault is not None else self.responder(request.path, n)
        status, headers, text = _parts(answer)
        self.received.append(
            Received(
                request.path,
                request.headers.get("webhook-id", ""),
                request.headers.get("webhook-timestamp", ""),
                dict(request.headers),
                body,
                now,
                status,
            )
        )
        assert self._arrived is not None
        async with self._arrived:
            self._arrived.notify_all()
        if status == HUNG:
            assert self._healed is not None
            try:
                await asyncio.wait_for(self._healed.wait(), _HANG_LIMIT_S)
            except TimeoutError:
                pass
            status = RESET  # never answer a held request
        elif self.delay_s:
            await asyncio.sleep(self.delay_s)
        if status == RESET:
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # the handler must not answer on a dead socket
        return web.Response(status=status, headers=headers, body=text)

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def wait_for(self, path: str, count: int, timeout_s: float) -> list[Received]:
        assert self._arrived is not None
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.at(path)) >= count), timeout_s
            )
        return self.at(path)
