"""A trigger in words, for people: `every weekday at 09:00 Europe/Paris`. The only
module that imports cron-descriptor."""

from __future__ import annotations

from datetime import UTC, datetime

from cron_descriptor import ExpressionDescriptor, Options

from clockwork_svc.domain import triggers

_OPTIONS = Options()
_OPTIONS.use_24hour_time_format = True
_OPTIONS.verbose = False
_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1_000, "second"))


def when(ms: int | None) -> str:
    """A time as `2026-11-27 09:00:00 UTC` ("" for none)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(ms: int) -> str:
    for unit_ms, name in _UNITS:
        if ms % unit_ms == 0:
            count = ms // unit_ms
            return f"{count} {name}" + ("s" if count != 1 else "")
    return f"{ms} ms"


def trigger(t: triggers.Trigger) -> str:
    if isinstance(t, triggers.OnceTrigger):
        return f"once at {when(t.at_ms)}"
    if isinstance(t, triggers.IntervalTrigger):
        text = f"every {duration(t.every_ms)}"
    else:
        described = ExpressionDescriptor(t.expression, _OPTIONS).get_description()
        text = f"{described} ({t.timezone})"
    if t.count:
        text += f", {t.count} times"
    if t.end_ms is not None:
        text += f", until {when(t.end_ms)}"
    return text


def ranges(numbers: list[int]) -> str:
    """Sorted numbers as ranges: `0-3, 8, 10-12`."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
