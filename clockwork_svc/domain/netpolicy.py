"""Which network addresses callbacks may connect to (the SSRF guard's rule).

Outside `clockwork dev`, only globally routable addresses are allowed, plus the
networks an operator lists explicitly. The check runs on the address actually
connected to (see clockwork_svc.delivery.http), so DNS rebinding cannot pass it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow_loopback: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()

    def permits(self, address: IPAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in net for net in self.allowed_networks):
            return True
        if address.is_loopback:
            return self.allow_loopback
        return address.is_global and not address.is_multicast


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """'10.0.0.0/8,fd00::/8' -> networks; raises ValueError naming the bad entry."""
    networks = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise ValueError(f"invalid network {part!r}: {exc}") from exc
    return tuple(networks)


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
