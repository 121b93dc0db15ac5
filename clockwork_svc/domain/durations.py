"""Human-friendly durations and times, shared by the CLI and the Kubernetes operator."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """'250ms', '10s', '1h30m', '2d' -> milliseconds; ValueError otherwise."""
    pos, total = 0, 0.0
    text = text.strip()
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_MS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ValueError(f"{text!r} is not a duration like 500ms, 10s, 5m, 1h30m, 2d")
    return int(total)


def parse_time_ms(text: str) -> int:
    """ISO 8601 -> epoch milliseconds; a time without an offset is taken as UTC."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO 8601 time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def format_time_ms(ms: int) -> str:
    """Epoch milliseconds -> RFC 3339 in UTC with a Z (what Kubernetes shows)."""
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
