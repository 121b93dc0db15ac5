"""Partitions between processes of this host on loopback, made by the kernel (nftables).

The replicated stores' nodes each listen on a loopback address of their own
(127.0.0.2-4 for Cassandra), so one node can be cut off from its clients while it
stays in touch with its peers: ``cut(address, port)`` drops every packet to and from
that address and port (the node's client port), both ways, in the host's output hook
(a loopback packet passes it once on its way). Packets vanish, connections are not
reset, as in a real partition; ``heal()`` removes the rules. The node's own traffic
with its peers (another port) goes on.

The etcd members share 127.0.0.1, so ``isolate(cgroup, ...)`` tells a member's
packets by the cgroup it runs in (e2e/infra/cgroups.py): it cuts one member off from
its peers while its clients still reach it, which leaves it alone in a minority.

Only this object's own nft table is touched; ``destroy()`` deletes it. Needs root and
``nft`` (nftables).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from e2e.infra import cgroups
from e2e.netns import NetnsError, run


def available() -> str | None:
    """None when loopback cuts can be made here, else why not (for a skip message)."""
    if shutil.which("nft") is None:
        return "`nft` not installed"
    try:
        LoopbackCut().create().destroy()
    except NetnsError as exc:
        return f"cannot create an nft table: {exc}"
    return None


def _nft(argv: Sequence[str], stdin: str | None = None, check: bool = True) -> None:
    run(["nft", *argv], stdin, check)


class LoopbackCut:
    """An nft table of drop rules for chosen (address, port) endpoints on this host."""

    def __init__(self) -> None:
        self.table = "clockwork_cut_" + secrets.token_hex(4)
        self.cuts: set[tuple[str, int]] = set()

    def create(self) -> LoopbackCut:
        _nft(
            ["-f", "-"],
            stdin=f"""
table ip {self.table} {{
  chain output {{
    type filter hook output priority 0; policy accept;
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
  }}
}}
""",
        )
        return self

    def cut(self, address: str, port: int) -> None:
        """Drop every TCP packet to or from `address:port`."""
        if (address, port) in self.cuts:
            return
        for rule in (
            f"ip daddr {address} tcp dport {port} drop",
            f"ip saddr {address} tcp sport {port} drop",
        ):
            _nft(["add", "rule", "ip", self.table, "output", *rule.split()])
        self.cuts.add((address, port))

    def isolate(self, cgroup: Path, own_port: int, peer_ports: Sequence[int]) -> None:
        """Cut the process in `cgroup` off from its peers: its connections to their
        `peer_ports`, and theirs to its `own_port`; its other ports stay reachable."""
        selector = cgroups.nft_selector(cgroup)
        ports = "{ " + ", ".join(str(p) for p in peer_ports) + " }"
        for chain, rule in (
            ("output", f"{selector} tcp dport {ports} drop"),
            ("input", f"{selector} tcp sport {ports} drop"),
            ("output", f"tcp dport {own_port} drop"),
            ("output", f"tcp sport {own_port} drop"),
        ):
            _nft(["add", "rule", "ip", self.table, chain, *rule.split()])

    def heal(self) -> None:
        """Remove every cut."""
        for chain in ("output", "input"):
            _nft(["flush", "chain", "ip", self.table, chain])
        self.cuts.clear()

    def destroy(self) -> None:
        """Delete the table (idempotent; errors are ignored)."""
        _nft(["delete", "table", "ip", self.table], check=False)
        self.cuts.clear()

    def __enter__(self) -> LoopbackCut:
        return self.create()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.destroy()
