"""The real node's pod network on this machine, and the guard around it.

Pods live on a Linux bridge (``clockwork0``, 10.242.0.0/16) that the bridge CNI
plugin attaches them to. The host's end of it, :data:`GATEWAY`, is the one address
through which pods reach what runs on the host: the apiserver (advertised there, so the
``kubernetes`` Service has an endpoint pods can use), Cassandra and etcd (which listen
on every local address), CoreDNS, the kubelet, and the tests' callback sinks.

Nothing a pod sends may leave this machine, so the bridge is fenced in:

* an nftables table drops every packet forwarded from the bridge to any other
  interface (pods talk to each other and to the host, nowhere else);
* the same table drops, on its way out, any packet still addressed to the Service
  range or to the fake (kwok) pod and node addresses: one that kube-proxy did not
  rewrite to a real pod would otherwise follow the default route off the machine.

:func:`ensure` sets all of it up (idempotent); :func:`remove` takes it away. Both
need root and iproute2/nftables.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from .server import InfraError

BRIDGE = "clockwork0"
SUBNET = "10.242.0.0/16"
GATEWAY = "10.242.0.1"
PREFIX = 16
SERVICE_RANGE = "10.0.0.0/24"
"""The apiserver's ``--service-cluster-ip-range``."""
KWOK_POD_RANGE = "10.244.0.0/16"
KWOK_NODE_IP = "10.0.1.1"
"""The addresses kwok gives its fake pods and node (``kube.py``): nothing listens there."""
FAKE_RANGES = (KWOK_POD_RANGE, f"{KWOK_NODE_IP}/32")
NFT_TABLE = "clockwork_pods"

_NFT_RULES = f"""\
table inet {NFT_TABLE} {{
  chain forward {{
    type filter hook forward priority 10; policy accept;
    iifname "{BRIDGE}" oifname != "{BRIDGE}" counter drop
  }}
  chain postrouting {{
    type filter hook postrouting priority 10; policy accept;
    ip daddr {{ {", ".join((SERVICE_RANGE, *FAKE_RANGES))} }} counter drop
  }}
}}
"""


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise InfraError(f"podnet: `ip {' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def _exists(device: str) -> bool:
    return _ip("link", "show", device, check=False).returncode == 0


def unavailable() -> str | None:
    """None when the pod network can be made here, else why not."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` not installed"
    return None


def ensure() -> None:
    """Create the bridge with the gateway address, and the nft fence."""
    problem = unavailable()
    if problem:
        raise InfraError(f"podnet: {problem}")
    if not _exists(BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
    addresses = _ip("-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f" {GATEWAY}/" not in addresses:
        _ip("addr", "add", f"{GATEWAY}/{PREFIX}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    _nft(["-f", "-"], _NFT_RULES, replace=True)
    for key in ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"):
        _sysctl(key, "1")


def remove() -> None:
    """Delete the bridge and the nft table (neither exists where `ip` or `nft` is
    missing: `ensure` refuses to run there)."""
    if unavailable():
        return
    if _exists(BRIDGE):
        _ip("link", "del", BRIDGE, check=False)
    subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True)


def _nft(argv: Sequence[str], stdin: str, *, replace: bool) -> None:
    if replace:
        subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True)
    done = subprocess.run(["nft", *argv], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise InfraError(f"podnet: nft failed: {done.stderr.strip()}")


def _sysctl(key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as exc:
        raise InfraError(f"podnet: cannot set {key}={value}: {exc}") from exc
