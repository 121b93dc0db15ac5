"""The ops HTTP endpoint of every process: /metrics, /healthz, /readyz.

(aiohttp's server side is used here and in server/http_gateway.py, the HTTP/JSON API; the
client side only in delivery/http.py.)
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from clockwork_svc.observability.metrics import Metrics

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


class OpsServer:
    def __init__(
        self,
        metrics: Metrics,
        ready: Callable[[], bool],
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        """`alive` false makes /healthz fail (a liveness probe then restarts the process)."""
        self._metrics = metrics
        self._ready = ready
        self._alive = alive
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/readyz", self._readiness)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _health(self, request: web.Request) -> web.Response:
        if self._alive():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="a background loop has stopped\n")

    async def _readiness(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")
