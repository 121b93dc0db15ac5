"""`clockwork receive`: a callback receiver that prints what Clockwork delivers.

For trying Clockwork out and for debugging targets; not for production use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web


def make_app(echo: Callable[[str], None], status: int) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        # webhook-timestamp has whole-second precision: show it as is, not as a lag.
        sent = request.headers.get("webhook-timestamp", "")
        stamp = f"ts={sent}" if sent else ""
        echo(
            f"{time.strftime('%H:%M:%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}Z "
            f"{request.method} {request.path_qs} id={request.headers.get('webhook-id', '-')} "
            f"{stamp} body={body[:200]!r}"
        )
        return web.Response(status=status, text="ok\n")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def serve(host: str, port: int, status: int, echo: Callable[[str], None]) -> None:
    runner = web.AppRunner(make_app(echo, status), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    echo(f"listening on http://{host}:{port}/ (answering {status}); Ctrl-C to stop")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
