"""A network namespace for one process under test, whose path to chosen loopback
services can be cut and healed by the kernel (nftables), for partition nemeses.

The servers of the test run (Cassandra, etcd, the recording sink) listen on
127.0.0.1 of this machine. A process inside the namespace reaches them at the very
same addresses, so it is configured exactly like its peers outside:

    namespace (10.x.y.2/30)                          host (10.x.y.1/30)
    connect 127.0.0.1:P --dnat--> 10.x.y.1:P ==veth==> --dnat--> 127.0.0.1:P

- in the namespace, an nft ``output`` NAT chain rewrites 127.0.0.1:P to the host end
  of the veth pair (and masquerades the source); ``route_localnet`` lets a packet
  with a loopback source leave on the veth before it is masqueraded;
- on the host, a prerouting NAT chain of the namespace's own nft table, matching only
  packets that arrive on its veth, rewrites them back to 127.0.0.1:P
  (``route_localnet`` on that one interface allows it).

``cut(port)`` adds drop rules for that port inside the namespace, both ways: packets
vanish, connections are not reset, as in a real partition; ``heal(port)`` removes
them. ``destroy()`` deletes the namespace (its veth pair and its nft tables go with
it) and the host-side table. Needs root, ``ip`` (iproute2) and ``nft`` (nftables).

Only loopback and the namespace's own veth pair are touched: the /30 is picked from
10.213.0.0/16 among those no interface uses, and every host-side rule matches the
namespace's own interface.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

_POOL = ipaddress.IPv4Network("10.213.0.0/16")


class NetnsError(RuntimeError):
    """A command that sets up or changes the kernel's network state failed."""


def available() -> str | None:
    """None when namespaces can be made here, else why not (for a skip message)."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` not installed"
    try:
        probe = Namespace().create([])
    except NetnsError as exc:
        return f"cannot create a network namespace: {exc}"
    probe.destroy()
    return None


def run(argv: Sequence[str], stdin: str | None = None, check: bool = True) -> str:
    """Run `argv` (ip, nft) and return its stdout; NetnsError when it fails (`check`)."""
    done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = run(["ip", "-4", "-o", "addr", "show"])
    nets = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            nets.append(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    return nets


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    candidates = list(_POOL.subnets(new_prefix=30))
    for _ in range(64):
        net = candidates[secrets.randbelow(len(candidates))]
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsError("no free /30 in 10.213.0.0/16")


class Namespace:
    """One network namespace with a veth pair to the host and NAT to chosen ports."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"cwtest-{tag}"
        self.host_if = f"cwh{tag}"
        self.ns_if = f"cwn{tag}"
        self.table = f"cwtest_{tag}"
        self.host_ip = ""
        self.ns_ip = ""
        self.ports: list[int] = []
        self.cut_ports: set[int] = set()
        self._created = False

    # --- life cycle ------------------------------------------------------------------

    def create(self, ports: Iterable[int]) -> Namespace:
        """Make the namespace; 127.0.0.1:P inside it reaches 127.0.0.1:P of the host for
        every P in `ports`."""
        self.ports = sorted(set(ports))
        net = _free_subnet()
        host, ns = list(net.hosts())[:2]
        self.host_ip, self.ns_ip = str(host), str(ns)
        run(["ip", "netns", "add", self.name])
        self._created = True
        try:
            self._wire(net.prefixlen)
        except BaseException:
            self.destroy()
            raise
        return self

    def _wire(self, prefix: int) -> None:
        run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        run(["ip", "link", "set", self.ns_if, "netns", self.name])
        run(["ip", "addr", "add", f"{self.host_ip}/{prefix}", "dev", self.host_if])
        run(["ip", "link", "set", self.host_if, "up"])
        Path(f"/proc/sys/net/ipv4/conf/{self.host_if}/route_localnet").write_text("1\n")
        self.exec(["ip", "addr", "add", f"{self.ns_ip}/{prefix}", "dev", self.ns_if])
        self.exec(["ip", "link", "set", self.ns_if, "up"])
        self.exec(["ip", "link", "set", "lo", "up"])
        for conf in ("all", self.ns_if):
            # /proc/sys/net is per namespace: written from inside, it is the namespace's.
            self.exec(["sh", "-c", f"echo 1 > /proc/sys/net/ipv4/conf/{conf}/route_localnet"])
        if not self.ports:
            return
        ports = ", ".join(str(p) for p in self.ports)
        run(
            ["nft", "-f", "-"],
            stdin=f"""
table ip {self.table} {{
  chain prerouting {{
    type nat hook prerouting priority -100; policy accept;
    iifname "{self.host_if}" ip daddr {self.host_ip} tcp dport {{ {ports} }} dnat to 127.0.0.1
  }}
}}
""",
        )
        self.exec(
            ["nft", "-f", "-"],
            stdin=f"""
table ip loopback_nat {{
  chain output {{
    type nat hook output priority -100; policy accept;
    ip daddr 127.0.0.1 tcp dport {{ {ports} }} dnat to {self.host_ip}
  }}
  chain postrouting {{
    type nat hook postrouting priority 100; policy accept;
    oifname "{self.ns_if}" masquerade
  }}
}}
table inet partition {{
  chain output {{
    type filter hook output priority 0; policy accept;
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
  }}
}}
""",
        )

    def destroy(self) -> None:
        """Delete everything `create` made (idempotent; errors are ignored)."""
        if self._created:
            run(["ip", "netns", "del", self.name], check=False)
            self._created = False
        # Normally gone with the namespace (the peer of a deleted veth end is deleted).
        run(["ip", "link", "del", self.host_if], check=False)
        run(["nft", "delete", "table", "ip", self.table], check=False)

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, *_: object) -> None:
        self.destroy()

    # --- running things inside -----------------------------------------------------------

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` to run inside the namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def exec(self, argv: Sequence[str], stdin: str | None = None) -> str:
        return run(self.command(argv), stdin=stdin)

    # --- the nemesis ------------------------------------------------------------------------

    def cut(self, port: int) -> None:
        """Drop every packet to or from the host's `port`, inside the namespace."""
        if port in self.cut_ports:
            return
        self.exec(["nft", "add", "rule", "inet", "partition", "output", f"tcp dport {port} drop"])
        self.exec(["nft", "add", "rule", "inet", "partition", "input", f"tcp sport {port} drop"])
        self.cut_ports.add(port)

    def heal(self) -> None:
        """Remove every cut."""
        self.exec(["nft", "flush", "chain", "inet", "partition", "output"])
        self.exec(["nft", "flush", "chain", "inet", "partition", "input"])
        self.cut_ports.clear()
