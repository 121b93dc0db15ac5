"""The types a server interceptor deals in (its continuation, a method's handler and
unary behaviour), as the call pipeline and the in-process calls use them, and the
replacement of a unary method's behaviour by a wrapper around it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

# Strings: grpc's classes are generic only to the type checker.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Continuation: TypeAlias = "Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]"
UnaryBehaviour: TypeAlias = "Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]"


def unary_behaviour(handler: Handler | None) -> UnaryBehaviour | None:
    """The handler's unary-unary behaviour, or None for a streaming or unknown method."""
    if handler is None or handler.unary_unary is None:
        return None
    return handler.unary_unary  # type: ignore[return-value]


def wrap_unary(handler: Handler, behaviour: UnaryBehaviour, *, decode: bool = True) -> Handler:
    """`handler` with `behaviour` in place of its unary behaviour; `decode=False` hands
    `behaviour` the request's raw bytes."""
    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=handler.request_deserializer if decode else None,
        response_serializer=handler.response_serializer,
    )
