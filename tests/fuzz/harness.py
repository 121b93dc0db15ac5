"""A real Clockwork api (app.running) on its own event loop in a background thread, so
synchronous hypothesis tests can call it through a plain gRPC channel with raw bytes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from clockwork_svc import app
from clockwork_svc.api.v1 import cluster_pb2, scheduler_pb2, tenants_pb2
from clockwork_svc.settings import ProcessSettings

T = TypeVar("T")
SERVICES: list[ServiceDescriptor] = [
    f.services_by_name[name]
    for f in (scheduler_pb2.DESCRIPTOR, tenants_pb2.DESCRIPTOR, cluster_pb2.DESCRIPTOR)
    for name in f.services_by_name
]
METHODS: list[MethodDescriptor] = [m for s in SERVICES for m in s.methods]
Metadata = Sequence[tuple[str, str]]


def path_of(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


@dataclass(frozen=True, slots=True)
class Reply:
    code: grpc.StatusCode
    details: str
    body: bytes


class ThreadedNode:
    """`with ThreadedNode(settings) as node:` runs an api until the block ends."""

    def __init__(self, settings: ProcessSettings, worker: bool = False) -> None:
        self._settings = settings
        self._worker = worker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._context: contextlib.AbstractAsyncContextManager[app.Node] | None = None
        self.port = 0
        self.http_port = 0  # when the settings turn the HTTP API on
        self._channel: grpc.Channel | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120) -> T:
        """Runs a coroutine on the server's loop (e.g. to seed data through the store)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def __enter__(self) -> ThreadedNode:
        self._thread.start()
        self._context = app.running(self._settings, api=True, worker=self._worker)
        node = self.run(self._context.__aenter__())
        assert node.api is not None
        self.port = node.api.port
        self.http_port = node.http.port if node.http is not None else 0
        self._channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._context is not None:
            self.run(self._context.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def call(self, path: str, body: bytes, metadata: Metadata = (), timeout_s: float = 30) -> Reply:
        assert self._channel is not None
        method: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
            path, request_serializer=None, response_deserializer=None
        )
        try:
            response: bytes = method(bytes(body), metadata=tuple(metadata), timeout=timeout_s)
        except grpc.RpcError as exc:
            err: Any = exc  # a grpc.Call as well
            return Reply(err.code(), err.details() or "", b"")
        return Reply(grpc.StatusCode.OK, "", response)

    def health(self, service: str = "") -> int:
        from grpc_health.v1 import health_pb2

        reply = self.call(
            "/grpc.health.v1.Health/Check",
            health_pb2.HealthCheckRequest(service=service).SerializeToString(),
        )
        assert reply.code is grpc.StatusCode.OK, reply
        status: int = health_pb2.HealthCheckResponse.FromString(reply.body).status
        return status


@contextlib.contextmanager
def threaded_node(settings: ProcessSettings) -> Iterator[ThreadedNode]:
    with ThreadedNode(settings) as node:
        yield node
