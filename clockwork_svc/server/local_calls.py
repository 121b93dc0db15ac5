"""Calls into the api's own gRPC services from inside the process, through the same
interceptor (admission, authentication, decoding, trace context) and servicers as a call that came
over the network: the HTTP gateway uses them, so a JSON call is admitted, authorized,
validated and answered exactly as its gRPC twin.

A call is made with the request already serialized, as gRPC hands it to the
interceptors, and its metadata (the `authorization` and `clockwork-tenant` values the
HTTP request carried). A call the handlers abort raises `CallFailed` with the status,
the message and the trailing metadata (the retry hint of a refusal).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import message

from clockwork_svc.server.interception import Continuation, Handler

log = logging.getLogger(__name__)

Metadata = tuple[tuple[str, str], ...]


class CallFailed(Exception):
    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        trailing: Metadata = (),
        *,
        too_large: bool = False,
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.trailing = trailing
        # Refused for its size, before any handler ran.
        self.too_large = too_large


class HandlerRecorder:
    """Stands in for a grpc server when the generated `add_*Servicer_to_server`
    functions register a service: keeps each method's handler by its path."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[object]) -> None:
        """The generic form of the same handlers: `add_registered_method_handlers`
        gets them by name."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Handler]) -> None:
        for name, handler in handlers.items():
            self.handlers[f"/{service}/{name}"] = handler


@dataclass(frozen=True, slots=True)
class _CallDetails(grpc.HandlerCallDetails):
    method: str
    invocation_metadata: Metadata


class LocalCalls:
    def __init__(
        self,
        handlers: Mapping[str, Handler],
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        max_message_bytes: int,
    ) -> None:
        self._max_message_bytes = max_message_bytes

        async def innermost(details: grpc.HandlerCallDetails) -> Handler | None:
            return handlers.get(details.method)

        chain: Continuation = innermost
        for interceptor in reversed(interceptors):
            chain = functools.partial(_through, interceptor, chain)
        self._chain = chain

    async def call(self, method: str, request: message.Message, metadata: Metadata) -> Any:
        """The reply to `request`; raises CallFailed."""
        raw = request.SerializeToString()
        if len(raw) > self._max_message_bytes:
            raise CallFailed(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"request of {len(raw)} bytes is larger than {self._max_message_bytes}",
                too_large=True,
            )
        handler = await self._chain(_CallDetails(method, metadata))
        if handler is None or handler.unary_unary is None:
            raise CallFailed(grpc.StatusCode.UNIMPLEMENTED, f"no method {method}")
        decode = handler.request_deserializer
        behaviour: Callable[[Any, Any], Awaitable[Any]] = handler.unary_unary
        try:
            return await behaviour(decode(raw) if decode else raw, _Context(metadata))
        except CallFailed:
            raise
        except Exception as exc:
            # What grpc answers UNKNOWN for: a fault of the handler, not of the caller.
            log.exception("%s failed", method)
            raise CallFailed(grpc.StatusCode.INTERNAL, "internal error") from exc


async def _through(
    interceptor: grpc.aio.ServerInterceptor,
    continuation: Continuation,
    details: grpc.HandlerCallDetails,
) -> Handler | None:
    return await interceptor.intercept_service(continuation, details)


class _Context(grpc.aio.ServicerContext[Any, Any]):
    """The part of a servicer context the interceptors and servicers use: the call's
    metadata, and `abort`."""

    def __init__(self, metadata: Metadata) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> Any:
        return self._metadata

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Any = (),
    ) -> NoReturn:
        raise CallFailed(code, details, tuple(trailing_metadata))

    async def abort_with_status(self, status: Any) -> NoReturn:
        raise CallFailed(status.code, status.details, tuple(status.trailing_metadata))

    def _unused(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("not available to a local call")

    read = write = send_initial_metadata = set_trailing_metadata = _unused
    set_code = set_details = set_compression = disable_next_message_compression = _unused
    peer = peer_identities = peer_identity_key = auth_context = _unused
