"""Parsing of human-friendly CLI values: durations, times, addresses, headers."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import click

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str, name: str) -> int:
    """'250ms', '10s', '1h30m', '2d' -> milliseconds."""
    pos, total = 0, 0.0
    text = text.strip()
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_MS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise click.BadParameter(
            f"{text!r} is not a duration like 500ms, 10s, 5m, 1h30m, 2d", param_hint=name
        )
    return int(total)


def time_ms(text: str, name: str) -> int:
    """ISO 8601 -> epoch milliseconds; a time without an offset is taken as UTC."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=name) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def host_port(text: str, name: str, default_port: int) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"{text!r} is not HOST:PORT", param_hint=name)
    return host.strip("[]") or "127.0.0.1", int(port)


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not NAME=VALUE", param_hint="--header")
    return name.strip(), value
