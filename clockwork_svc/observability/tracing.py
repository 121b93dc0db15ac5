"""Spans of api calls and of deliveries, exported over OTLP/HTTP when an endpoint is
configured (`--otlp-endpoint`); the only module that imports OpenTelemetry.

The trace context travels either way: an api call continues the caller's
`traceparent`, a schedule keeps the context of the call that created it, and each
delivery attempt sends a `traceparent` under it. Without an endpoint no span is
recorded and the context is made by domain/trace_context.py; with one, each of those
steps is a span of the SDK, whose context is the one sent on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Literal

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from clockwork_svc.domain import trace_context

Kind = Literal["server", "client"]
Attribute = str | int | float | bool
_KINDS = {"server": trace.SpanKind.SERVER, "client": trace.SpanKind.CLIENT}
_PROPAGATOR = TraceContextTextMapPropagator()


class Span:
    """An open span: the `traceparent` to send on, and attributes to record."""

    def __init__(self, traceparent: str, recorded: trace.Span | None = None) -> None:
        self.traceparent = traceparent
        self._recorded = recorded

    def set(self, name: str, value: Attribute) -> None:
        if self._recorded is not None:
            self._recorded.set_attribute(name, value)

    def failed(self, description: str) -> None:
        if self._recorded is not None:
            self._recorded.set_status(trace.Status(trace.StatusCode.ERROR, description))


class Tracing:
    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("clockwork") if provider is not None else None

    @classmethod
    def exporting(cls, endpoint: str, service: str) -> Tracing:
        """Spans batched and sent to the OTLP/HTTP collector at `endpoint`
        (`http://collector:4318`), from a thread of the SDK."""
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider)

    @property
    def recording(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        parent: str,
        kind: Kind,
        attributes: Mapping[str, Attribute] | None = None,
    ) -> Iterator[Span]:
        """A span under `parent` (a `traceparent`; a new trace if empty or malformed)."""
        if self._tracer is None:
            yield Span(str(trace_context.child(parent)))
            return
        context = _PROPAGATOR.extract({trace_context.HEADER: parent}) if parent else None
        recorded = self._tracer.start_span(
            name, context=context, kind=_KINDS[kind], attributes=attributes
        )
        try:
            yield Span(_traceparent(recorded.get_span_context()), recorded)
        finally:
            recorded.end()

    def shutdown(self) -> None:
        """Sends the spans still batched (bounded by the SDK's export timeout)."""
        if self._provider is not None:
            self._provider.shutdown()


def _traceparent(context: trace.SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
