"""The trace context of an api call: the caller's `traceparent` metadata (the header,
over HTTP) is continued by a server span when spans are exported, and is what a
schedule created by the call keeps (`current_trace_parent`), so its deliveries join
the caller's trace. Every call sets it (call_pipeline.py)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from clockwork_svc.observability.tracing import Tracing

current_trace_parent: contextvars.ContextVar[str] = contextvars.ContextVar(
    "clockwork_trace_parent", default=""
)


@contextlib.contextmanager
def server_span(tracing: Tracing, name: str, given: str) -> Iterator[None]:
    """A server span continuing `given` (the caller's `traceparent`, as sent), whose
    context is the call's `current_trace_parent` while it is open."""
    with tracing.span(name, given, "server", {"rpc.system": "grpc"}) as span:
        current_trace_parent.set(span.traceparent)
        yield
