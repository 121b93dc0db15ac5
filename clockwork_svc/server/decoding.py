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

from typing import Any

import grpc
from google.protobuf.message import DecodeError

from clockwork_svc.server.interception import Continuation, Handler, unary_behaviour, wrap_unary


class RequestDecoding(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        inner = unary_behaviour(handler)
        if handler is None or inner is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer

        async def decoded(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                request = parse(raw)
            except DecodeError as exc:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"request: cannot be decoded: {exc}"
                )
                raise AssertionError("unreachable: abort raises") from exc
            return await inner(request, context)

        return wrap_unary(handler, decoded, decode=False)
