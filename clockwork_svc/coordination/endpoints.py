"""The etcd endpoint setting as one gRPC channel target that names every member.

`--etcd` / `CLOCKWORK_ETCD` takes `HOST[:PORT][,HOST[:PORT]...]`: the members' IP
addresses (`10.0.0.1:2379,10.0.0.2:2379`, `[fd00::1]:2379,...`) or one DNS name that
resolves to every member (a headless Service). The target hands the whole list to
gRPC's own resolvers (`ipv4:`, `ipv6:`, `dns:///`), so the channel's pick_first policy
moves to another member when the one it is connected to goes away, without the
coordinator opening a new client. Several DNS names have no such target (gRPC's DNS
resolver takes one name), so they are refused rather than silently cut to the first.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple

DEFAULT_PORT = 2379
"""etcd's client port, for an entry without one."""

_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?")
_PORT = re.compile(r"[0-9]{1,5}")


class _Member(NamedTuple):
    host: str  # an IPv6 address without its brackets
    port: int
    ip_version: int | None  # None: a DNS name


def grpc_target(endpoints: str, first: int = 0) -> str:
    """`HOST[:PORT][,...]` -> the gRPC target of every member; ValueError when invalid.

    One IP address gives a plain `HOST:PORT` target. `first` rotates a list of
    addresses so that member `first` (modulo their number) is listed, and so tried,
    first: a client that could not keep a lease through one member starts its next
    session on another, instead of on a member cut off in a minority that still
    accepts connections.
    """
    members = _members(endpoints)
    shift = first % len(members)
    members = members[shift:] + members[:shift]
    names = [m for m in members if m.ip_version is None]
    if names:
        if len(members) > 1:
            raise ValueError(
                f"{endpoints!r}: a DNS name ({names[0].host!r}) must be the only entry; give "
                "the members' IP addresses, or one name that resolves to every member"
            )
        return f"dns:///{names[0].host}:{names[0].port}"
    versions = {m.ip_version for m in members}
    if len(versions) > 1:
        raise ValueError(f"{endpoints!r} mixes IPv4 and IPv6 addresses; give one family")
    addresses = ",".join(_address(m) for m in members)
    return addresses if len(members) == 1 else f"ipv{versions.pop()}:{addresses}"


def tls_name(endpoints: str, first: int = 0) -> str:
    """The name a TLS client checks the certificate against: the host (IP address
    without brackets, or DNS name) of the member `grpc_target(endpoints, first)` tries
    first; ValueError when invalid.

    gRPC checks every member of a channel against one name, its authority, which for a
    list of addresses is the whole list (`10.0.0.1:2379,10.0.0.2:2379`, a name no
    certificate carries). The coordinator sets this name instead, so a member whose
    certificate carries its own address passes; a channel that moves to another member
    is refused by that member's certificate, unless it carries this name too, and the
    coordinator's next session then starts on the next member, checked by its own name.
    """
    members = _members(endpoints)
    return members[first % len(members)].host


def _members(endpoints: str) -> list[_Member]:
    return [
        _member(entry.strip(), number, endpoints)
        for number, entry in enumerate(endpoints.split(","), start=1)
    ]


def _member(entry: str, number: int, endpoints: str) -> _Member:
    if not entry:
        raise ValueError(f"{endpoints!r}: entry {number} is empty")
    host, port = _split(entry)
    bracketed = entry.startswith("[")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if bracketed or not _NAME.fullmatch(host):
            raise ValueError(f"{entry!r} is not HOST:PORT") from None
        return _Member(host, port, None)
    if bracketed != (address.version == 6):
        raise ValueError(f"{entry!r} is not HOST:PORT (only IPv6 addresses take brackets)")
    return _Member(str(address), port, address.version)


def _split(entry: str) -> tuple[str, int]:
    """`HOST[:PORT]` or `[V6][:PORT]` -> (host without brackets, port)."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r} is not HOST:PORT")
        return host, _port(rest[1:] if rest else None, entry)
    if entry.count(":") > 1:
        raise ValueError(f"{entry!r} is not HOST:PORT (write an IPv6 address as [ADDRESS]:PORT)")
    host, colon, port = entry.partition(":")
    return host, _port(port if colon else None, entry)


def _port(text: str | None, entry: str) -> int:
    if text is None:
        return DEFAULT_PORT
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r} is not HOST:PORT (a port is 1 to 65535)")
    return int(text)


def _address(member: _Member) -> str:
    host = f"[{member.host}]" if member.ip_version == 6 else member.host
    return f"{host}:{member.port}"
