"""Parsing of human-friendly CLI values: durations, times, addresses, headers."""

from __future__ import annotations

import click

from clockwork_svc.coordination import endpoints
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


def duration_text(ms: int) -> str:
    """Milliseconds as `duration_ms` reads them back: 60000 -> '60s', 250 -> '250ms'."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _split_host_port(text: str, name: str) -> tuple[str, int | None]:
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, None
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"{text!r} is not HOST:PORT", param_hint=name)
    return host.strip("[]") or "127.0.0.1", int(port)


def host_port(text: str, name: str, default_port: int) -> tuple[str, int]:
    """HOST[:PORT] -> (host, port), `default_port` when the text has none."""
    host, port = _split_host_port(text, name)
    return host, default_port if port is None else port


def host_of(text: str, name: str) -> str:
    """Checks HOST[:PORT] and returns the host, for an address whose port the CLI
    does not use."""
    return _split_host_port(text, name)[0]


def etcd_endpoints(text: str, name: str) -> str:
    """Checks the etcd members, `HOST[:PORT][,HOST[:PORT]...]` (IP addresses, or one DNS
    name), and returns the text as given."""
    try:
        endpoints.grpc_target(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from exc
    return text


def header(text: str, flag: str = "--header") -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not NAME=VALUE", param_hint=flag)
    return name.strip(), value


def labels(texts: tuple[str, ...]) -> dict[str, str]:
    """`--label KEY=VALUE` options as a mapping (the server checks the rules)."""
    return dict(header(text, "--label") for text in texts)
