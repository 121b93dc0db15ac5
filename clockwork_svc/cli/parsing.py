"""Parsing of human-friendly CLI values: durations, times, addresses, headers."""

from __future__ import annotations

import click

from clockwork_svc.domain.durations import parse_duration_ms, parse_time_ms


def duration_ms(text: str, name: str) -> int:
    """'250ms', '10s', '1h30m', '2d' -> milliseconds."""
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from exc


def time_ms(text: str, name: str) -> int:
    """ISO 8601 -> epoch milliseconds; a time without an offset is taken as UTC."""
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from exc


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
