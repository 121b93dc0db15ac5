"""Server interceptors that wrap each method's handler once, not once per call.

grpc.aio runs every interceptor's `intercept_service` for every call, and a wrapping
interceptor would build a new handler (and its closures) each time. What a wrapper
does depends only on the method, and the server's handlers are fixed once it starts,
so `MethodWrapping` builds each method's wrapped handler on its first call and answers
later calls from its table, without running the interceptors after it again. Unknown
methods (no handler) are not remembered: a caller cannot grow the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class MethodWrapping(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        self._wrapped: dict[str, Handler] = {}

    def wrap(self, method: str, handler: Handler) -> Handler:
        """The handler to serve `method` with (`handler` itself to leave it as it is)."""
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        wrapped = self._wrapped[method] = self.wrap(method, handler)
        return wrapped
