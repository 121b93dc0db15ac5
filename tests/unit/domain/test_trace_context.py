"""W3C traceparent parsing and the context of a delivery's span."""

from __future__ import annotations

import itertools

import pytest

from clockwork_svc.domain import trace_context
from clockwork_svc.domain.trace_context import TraceParent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def counting_bytes() -> object:
    counter = itertools.count(1)
    return lambda n: bytes([next(counter)] * n)


def test_a_valid_value_is_parsed() -> None:
    assert trace_context.parse(VALID) == TraceParent(
        "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01"
    )
    # A later version's extra fields are ignored; version 00 may have none.
    assert trace_context.parse("01" + VALID[2:] + "-what-comes-next") is not None
    assert trace_context.normalized(" " + VALID + " ") == VALID


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        VALID.upper(),
        "ff" + VALID[2:],
        VALID + "-extra",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    ],
)
def test_malformed_values_are_ignored(value: str) -> None:
    assert trace_context.parse(value) is None
    assert trace_context.normalized(value) == ""


def test_a_child_continues_the_trace_with_a_span_of_its_own() -> None:
    child = trace_context.child(VALID, counting_bytes())  # type: ignore[arg-type]
    assert child.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child.span_id == "01" * 8 != "00f067aa0ba902b7"
    assert child.flags == "01"
    unsampled = VALID[:-2] + "00"
    assert trace_context.child(unsampled).flags == "00"


def test_without_a_valid_parent_a_child_starts_a_trace() -> None:
    for parent in ("", "garbage"):
        child = trace_context.child(parent)
        assert trace_context.parse(str(child)) == child
        assert child.flags == trace_context.SAMPLED
    assert trace_context.child("").trace_id != trace_context.child("").trace_id
