"""The HTTP/JSON API (`--http-listen`): every v1 RPC at the path its `google.api.http`
rule names, served by the api's own gRPC handlers (clockwork_svc/server/local_calls.py),
so admission, authentication, tenant isolation, validation and errors are the gRPC
API's.

A request carries `Authorization: Bearer <token>` and, for an admin acting for a
tenant, `Clockwork-Tenant`. A failed call is answered with the HTTP status of its
gRPC status and a JSON body naming the status, the message and the field; a refusal
with a retry hint carries `Retry-After`. The OpenAPI document is at
/v1/openapi.json, the dashboard at /ui (clockwork_svc/dashboard/). Neither tokens
nor bodies are logged.
"""

from __future__ import annotations

import math
import ssl
import urllib.parse
from collections.abc import Sequence
from typing import Any

import grpc
from aiohttp import web

from clockwork_svc.api import http_rules, json_transcoding
from clockwork_svc.api.http_rules import Route
from clockwork_svc.api.status import error_of, http_status_of
from clockwork_svc.dashboard.pages import Dashboard
from clockwork_svc.domain import trace_context
from clockwork_svc.errors import InvalidArgument
from clockwork_svc.server.admission import PUSHBACK_METADATA
from clockwork_svc.server.auth import TENANT_METADATA
from clockwork_svc.server.grpc_server import TlsSettings
from clockwork_svc.server.local_calls import CallFailed, LocalCalls

OPENAPI_PATH = "/v1/openapi.json"
API_VERSION = "v1"
JSON_TYPES = frozenset({"application/json"})
_NO_STORE = {"Cache-Control": "no-store"}


class _RequestError(Exception):
    def __init__(self, http_status: int, code: grpc.StatusCode, message: str, field: str = ""):
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message
        self.field = field


class HttpGateway:
    def __init__(
        self,
        calls: LocalCalls,
        table: Sequence[Route],
        openapi: dict[str, Any],
        max_body_bytes: int,
        dashboard: Dashboard | None = None,
    ) -> None:
        self._calls = calls
        self._dashboard = dashboard
        self._routes = tuple(table)
        self._openapi = openapi
        self._max_body_bytes = max_body_bytes
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        app = web.Application(client_max_size=self._max_body_bytes + 1)
        app.router.add_get(OPENAPI_PATH, self._serve_openapi)
        if self._dashboard is not None:
            self._dashboard.add_routes(app)
        # Every other path, newlines included: a JSON answer even for a path no route has.
        app.router.add_route("*", r"/{tail:[\s\S]*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve_openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self._openapi)

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            route, values = self._route(request)
            body = await self._body(request, route)
            query = _query(request)
            message = json_transcoding.request_of(route, values, query, body)
            reply = await self._calls.call(route.grpc_method, message, _metadata(request))
        except InvalidArgument as exc:
            return _error(400, grpc.StatusCode.INVALID_ARGUMENT, exc.message, exc.field)
        except _RequestError as exc:
            return _error(exc.http_status, exc.code, exc.message, exc.field)
        except CallFailed as exc:
            return _failed(exc)
        return web.json_response(json_transcoding.to_json(reply), headers=_NO_STORE)

    def _route(self, request: web.Request) -> tuple[Route, dict[str, str]]:
        raw_path = request.raw_path.partition("?")[0]
        try:
            return http_rules.resolve(self._routes, request.method, raw_path)
        except http_rules.NoRoute as exc:
            if exc.path_known:
                raise _RequestError(
                    405, grpc.StatusCode.UNIMPLEMENTED, f"{request.method} is not allowed here"
                ) from exc
            raise _RequestError(404, grpc.StatusCode.NOT_FOUND, "no such path") from exc
        except ValueError as exc:
            raise _RequestError(400, grpc.StatusCode.INVALID_ARGUMENT, str(exc), "path") from exc

    async def _body(self, request: web.Request, route: Route) -> bytes:
        limit = self._max_body_bytes
        if (request.content_length or 0) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        body = b"".join(chunks)
        if body.strip() and route.body and request.content_type not in JSON_TYPES:
            raise _RequestError(
                415,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the body must be application/json, not {request.content_type!r}",
                "Content-Type",
            )
        return body


def server_tls(tls: TlsSettings) -> ssl.SSLContext:
    """The gRPC listener's certificate, and its client CA when it requires client
    certificates."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file is not None:
        context.load_verify_locations(tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _query(request: web.Request) -> list[tuple[str, str]]:
    try:
        return urllib.parse.parse_qsl(
            request.rel_url.raw_query_string, keep_blank_values=True, errors="strict"
        )
    except UnicodeDecodeError as exc:
        raise _RequestError(
            400, grpc.StatusCode.INVALID_ARGUMENT, "the query is not UTF-8", "query"
        ) from exc


def _metadata(request: web.Request) -> tuple[tuple[str, str], ...]:
    found = []
    if "Authorization" in request.headers:
        found.append(("authorization", request.headers["Authorization"]))
    if "Clockwork-Tenant" in request.headers:
        found.append((TENANT_METADATA, request.headers["Clockwork-Tenant"]))
    if trace_context.HEADER in request.headers:
        found.append((trace_context.HEADER, request.headers[trace_context.HEADER]))
    return tuple(found)


def _too_large(limit: int) -> _RequestError:
    return _RequestError(
        413, grpc.StatusCode.RESOURCE_EXHAUSTED, f"the body is larger than {limit} bytes", "body"
    )


def _failed(exc: CallFailed) -> web.Response:
    error = error_of(exc.code, exc.details)
    field, message = "", exc.details
    if isinstance(error, InvalidArgument):
        field, message = error.field, error.message
    status = http_status_of(exc.code)
    if exc.code is grpc.StatusCode.RESOURCE_EXHAUSTED and exc.too_large:
        status = 413
    retry_after = dict(exc.trailing).get(PUSHBACK_METADATA)
    headers = {}
    if retry_after is not None and retry_after.isdigit():
        headers["Retry-After"] = str(max(1, math.ceil(int(retry_after) / 1000)))
    return _error(status, exc.code, message, field, headers)


def _error(
    http_status: int,
    code: grpc.StatusCode,
    message: str,
    field: str = "",
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"code": http_status, "status": code.name, "message": message, "field": field}}
    return web.json_response(body, status=http_status, headers={**_NO_STORE, **(headers or {})})
