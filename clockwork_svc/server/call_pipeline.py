"""The api's server interceptor: every unary call of a v1 service passes admission,
authentication, request decoding and its trace context, in that order, before its
servicer method runs.

- **Admission** (admission.py): past the in-flight limit a call is refused
  UNAVAILABLE with a retry hint before anything else is looked at.
- **Authentication** (auth.py): the principal resolved from the call's credential is
  set in `current_principal` for the servicer; a call without a valid one is refused
  UNAUTHENTICATED before its body is looked at.
- **Decoding**: grpc hands the behaviour the request's raw bytes and it parses them
  here, so a body that is not a valid serialized request (a string field that is not
  UTF-8, a corrupt wire format) is refused INVALID_ARGUMENT. Left to grpc, the
  deserializer's exception is reported as UNKNOWN, which tells the client nothing and
  looks like a server fault.
- **Trace context** (call_tracing.py): the caller's `traceparent`, continued by a
  server span around the servicer when spans are exported.

Health checks and reflection (auth.OPEN_SERVICE_PREFIXES) are only decoded: never
refused for load, open without a token, and without a span.

The steps run in one coroutine around the servicer's, composed the first time a
method is called and kept for the next calls: grpc.aio runs every interceptor's
`intercept_service` on every call, so each step as an interceptor of its own, each
wrapping the handler of the next one, costs that again per step and per call.
`bench.api_overhead` measures what the pipeline adds to a call's server CPU
(docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from clockwork_svc.domain import trace_context
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.server.admission import Admission, refuse
from clockwork_svc.server.auth import OPEN_SERVICE_PREFIXES, Authenticator, current_principal
from clockwork_svc.server.call_tracing import current_trace_parent, server_span
from clockwork_svc.server.interception import (
    Continuation,
    Handler,
    UnaryBehaviour,
    unary_behaviour,
    wrap_unary,
)

Parse = Callable[[bytes], Any]


class CallPipeline(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        admission: Admission,
        on_refused: Callable[[], None],
        authenticator: Authenticator,
        tracing: Tracing,
    ) -> None:
        self._admission = admission
        self._on_refused = on_refused
        self._authenticator = authenticator
        self._tracing = tracing
        # Each method's composed handler, by its path: only methods that exist are
        # kept (a call of an unknown one gets None from the continuation).
        self._handlers: dict[str, Handler] = {}
        # Takes the body as raw bytes: a refused call's request is never decoded.
        self._refusal: Handler = grpc.unary_unary_rpc_method_handler(self._refuse)

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        method = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            handler = self._compose(method, await continuation(handler_call_details))
            if handler is None:
                return None
            self._handlers[method] = handler
        if self._admission.full and not method.startswith(OPEN_SERVICE_PREFIXES):
            # The cheap path: nothing of the call is looked at.
            return self._refusal
        return handler

    def _compose(self, method: str, handler: Handler | None) -> Handler | None:
        inner = unary_behaviour(handler)
        if handler is None or inner is None or handler.request_deserializer is None:
            return handler  # streaming (reflection), or unknown
        parse: Parse = handler.request_deserializer
        if method.startswith(OPEN_SERVICE_PREFIXES):
            return wrap_unary(handler, _decoded(parse, inner), decode=False)
        return wrap_unary(handler, self._guarded(method, parse, inner), decode=False)

    def _guarded(self, method: str, parse: Parse, inner: UnaryBehaviour) -> UnaryBehaviour:
        admission, authenticator, tracing = self._admission, self._authenticator, self._tracing
        refuse_call = self._refuse
        span_name = method.lstrip("/")

        async def call(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = admission.try_enter()
            if started is None:
                await refuse_call(raw, context)
                raise AssertionError("unreachable: refuse raises")
            try:
                metadata = {
                    k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)
                }
                principal, problem = await authenticator.resolve(metadata)
                if principal is None:
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)
                    raise AssertionError("unreachable: abort raises")
                current_principal.set(principal)
                request = await _parse(parse, raw, context)
                # As given: a malformed one starts a new trace in the span, and a
                # schedule keeps only a well-formed one (Scheduling normalizes it).
                given = metadata.get(trace_context.HEADER, "")
                if not tracing.recording:
                    current_trace_parent.set(given)
                    return await inner(request, context)
                with server_span(tracing, span_name, given):
                    return await inner(request, context)
            finally:
                admission.leave(started)

        return call

    async def _refuse(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._on_refused()
        await refuse(self._admission, context)


def _decoded(parse: Parse, inner: UnaryBehaviour) -> UnaryBehaviour:
    async def call(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await inner(await _parse(parse, raw, context), context)

    return call


async def _parse(parse: Parse, raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    try:
        return parse(raw)
    except DecodeError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: cannot be decoded: {exc}")
        raise AssertionError("unreachable: abort raises") from exc
