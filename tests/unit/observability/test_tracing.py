"""Spans of the SDK when tracing records (an in-memory exporter here), and the trace
context alone when it does not."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clockwork_svc.domain import trace_context
from clockwork_svc.observability.tracing import Tracing

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_without_an_exporter_the_context_still_travels() -> None:
    tracing = Tracing()
    assert not tracing.recording
    with tracing.span("clockwork.deliver", PARENT, "client", {"a": 1}) as span:
        span.set("ignored", 2)
        span.failed("ignored")
    sent = trace_context.parse(span.traceparent)
    assert sent is not None and sent.trace_id == PARENT[3:35] and sent.span_id != PARENT[36:52]


def test_a_recorded_span_is_the_child_of_its_parent_and_carries_its_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    with tracing.span("clockwork.deliver", PARENT, "client", {"clockwork.attempt": 2}) as span:
        span.set("http.response.status_code", 503)
        span.failed("status 503")
    with tracing.span("orphan", "not a traceparent", "server") as orphan:
        pass
    tracing.shutdown()
    first, second = exporter.get_finished_spans()
    assert first.name == "clockwork.deliver"
    assert first.parent is not None and first.parent.span_id == int(PARENT[36:52], 16)
    assert first.context.trace_id == int(PARENT[3:35], 16)
    assert first.attributes == {"clockwork.attempt": 2, "http.response.status_code": 503}
    assert not first.status.is_ok
    # The traceparent sent on is the recorded span's own context.
    assert span.traceparent == f"00-{PARENT[3:35]}-{first.context.span_id:016x}-01"
    assert second.parent is None
    assert orphan.traceparent.split("-")[1] == f"{second.context.trace_id:032x}"
