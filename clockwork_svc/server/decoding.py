"""Request decoding as part of the call: a body that is not a valid serialized request
(a string field that is not UTF-8, a corrupt wire format) is refused with
INVALID_ARGUMENT.

Left to grpc, the deserializer's exception is reported as UNKNOWN, which tells the
client nothing and looks like a server fault. This interceptor takes over decoding for
every unary method: grpc hands the handler the raw bytes and the handler parses them.
It sits inside the auth interceptor, so an unauthenticated caller is refused before
its body is looked at.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError


class RequestDecoding(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        inner = handler.unary_unary
        parse = handler.request_deserializer

        async def decoded(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                request = parse(raw)
            except DecodeError as exc:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"request: cannot be decoded: {exc}"
                )
                raise AssertionError("unreachable: abort raises") from exc
            return await inner(request, context)  # type: ignore[arg-type]

        return grpc.unary_unary_rpc_method_handler(
            decoded, request_deserializer=None, response_serializer=handler.response_serializer
        )
