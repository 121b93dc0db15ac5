"""A recording HTTP callback receiver for tests (a real server on loopback).

It logs every request (delivery id, attempt headers, body, receive time) and
answers with programmable responses: a status per delivery id attempt, or a delay.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

RESET = -1


@dataclass(frozen=True)
class Received:
    path: str
    delivery_id: str
    timestamp: str
    headers: dict[str, str]
    body: bytes
    received_ms: int


@dataclass
class RecordingSink:
    received: list[Received] = field(default_factory=list)
    # (path, n-th request to that path, 1-based) -> status; default 200. RESET closes the
    # connection without an answer (a connection reset, as a crashing server does).
    responder: Callable[[str, int], int | tuple[int, dict[str, str]]] = lambda path, n: 200
    delay_s: float = 0.0
    port: int = 0
    _runner: web.AppRunner | None = None
    _counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _arrived: asyncio.Condition | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> RecordingSink:
        self._arrived = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time_ns() // 1_000_000
        self._counts[request.path] += 1
        n = self._counts[request.path]
        self.received.append(
            Received(
                request.path,
                request.headers.get("webhook-id", ""),
                request.headers.get("webhook-timestamp", ""),
                dict(request.headers),
                body,
                now,
            )
        )
        assert self._arrived is not None
        async with self._arrived:
            self._arrived.notify_all()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        answer = self.responder(request.path, n)
        if answer == RESET:
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # the handler must not answer on a dead socket
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        return web.Response(status=status, headers=headers, text="ok")

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def wait_for(self, path: str, count: int, timeout_s: float) -> list[Received]:
        assert self._arrived is not None
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.at(path)) >= count), timeout_s
            )
        return self.at(path)
