"""W3C Trace Context (`traceparent`) for callbacks: a schedule keeps the trace context
of the call that created it, and each delivery attempt continues that trace with a
span id of its own, so a receiver's spans join the creator's trace.

`00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>`. A malformed value
is ignored, as the W3C recommendation asks: the delivery then starts a new trace.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

HEADER = "traceparent"
# Version 00's fields; a later version may append more after another dash.
_PATTERN = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
SAMPLED = "01"


@dataclass(frozen=True, slots=True)
class TraceParent:
    trace_id: str
    span_id: str
    flags: str

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def parse(value: str) -> TraceParent | None:
    """The trace context of a `traceparent` value, or None for a malformed one."""
    found = _PATTERN.fullmatch(value.strip())
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, flags)


def normalized(value: str) -> str:
    """`value` as a version-00 `traceparent`, or "" when malformed (what a schedule
    keeps)."""
    parent = parse(value)
    return str(parent) if parent is not None else ""


def child(parent: str, random_bytes: Callable[[int], bytes] = os.urandom) -> TraceParent:
    """The context of a new span under `parent` (a new trace when `parent` is empty or
    malformed)."""
    found = parse(parent) if parent else None
    span_id = random_bytes(8).hex()
    if found is None:
        return TraceParent(random_bytes(16).hex(), span_id, SAMPLED)
    return TraceParent(found.trace_id, span_id, found.flags)
