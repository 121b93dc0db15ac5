"""The trace context of an api call: the caller's `traceparent` metadata (the header,
over HTTP) is continued by a server span when spans are exported, and is what a
schedule created by the call keeps (`current_trace_parent`), so its deliveries join
the caller's trace."""

from __future__ import annotations

import contextvars
from typing import Any

import grpc

from clockwork_svc.domain import trace_context
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.server.auth import OPEN_SERVICE_PREFIXES
from clockwork_svc.server.interception import Continuation, Handler, unary_behaviour, wrap_unary

current_trace_parent: contextvars.ContextVar[str] = contextvars.ContextVar(
    "clockwork_trace_parent", default=""
)


class TraceContextInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        inner = unary_behaviour(handler)
        if handler is None or inner is None:
            return handler
        if handler_call_details.method.startswith(OPEN_SERVICE_PREFIXES):
            return handler  # health checks and reflection: no span
        tracing = self._tracing
        method = handler_call_details.method

        async def traced(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            # As given: a malformed one starts a new trace in the span, and a schedule
            # keeps only a well-formed one (Scheduling normalizes it).
            given = ""
            for name, value in context.invocation_metadata() or ():
                if name == trace_context.HEADER and isinstance(value, str):
                    given = value
            if not tracing.recording:
                current_trace_parent.set(given)
                return await inner(request, context)
            with tracing.span(method.lstrip("/"), given, "server", {"rpc.system": "grpc"}) as span:
                current_trace_parent.set(span.traceparent)
                return await inner(request, context)

        return wrap_unary(handler, traced)
