"""Three etcd members on this machine: the topology production runs.

The members differ only in name, ports and data directory, and all start at once
with the same ``--initial-cluster`` list. Unlike the single test member, they keep
etcd's own raft timing (100 ms heartbeat, 1 s election timeout): a follower that
stops hearing from its leader for a second starts an election, as in production.

Clients get every member's address (``CLOCKWORK_ETCD_CLUSTER``), and Clockwork's
client fails over between them (clockwork_svc/coordination/endpoints.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .etcd import Etcd, _http_json
from .group import RunningGroup, ServerGroup
from .process import pick_free_port
from .server import ProbeError, Running

SIZE = 3
ENV_VAR = "CLOCKWORK_ETCD_CLUSTER"
CLUSTER_TOKEN = "clockwork-test-cluster"


def member_name(index: int) -> str:
    return f"member{index + 1}"


class ClusterMember(Etcd):
    """One member of the group; its peers' URLs are read from their recorded ports."""

    def __init__(self, members_dir: Path, cache_dir: Path | None, *, index: int, size: int) -> None:
        self.name = member_name(index)
        self.index = index
        self.size = size
        super().__init__(members_dir, cache_dir)

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {}  # the group publishes one line for all its members

    def _peer_url(self, index: int) -> str:
        path = self.state_dir / member_name(index) / "instance.json"
        port = json.loads(path.read_text())["ports"]["peer"]
        return f"http://{self.host}:{port}"

    def _membership(self, peer_url: str) -> list[str]:
        cluster = ",".join(f"{member_name(i)}={self._peer_url(i)}" for i in range(self.size))
        return [
            f"--name={self.name}",
            f"--initial-cluster={cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={CLUSTER_TOKEN}",
        ]


class EtcdCluster(ServerGroup):
    """Three members, one raft group; ``start()`` returns when every member sees one leader."""

    name = "etcd-cluster"
    env_var = ENV_VAR

    def __init__(self, state_dir: Path | None = None, cache_dir: Path | None = None) -> None:
        super().__init__(state_dir, cache_dir)
        self._members = [
            ClusterMember(self.members_dir, cache_dir, index=i, size=SIZE) for i in range(SIZE)
        ]

    @property
    def members(self) -> Sequence[ClusterMember]:
        return self._members

    def assign_ports(self) -> None:
        """Two ports per member, all different (they share 127.0.0.1)."""
        paths = [member.dir / "instance.json" for member in self._members]
        if all(path.is_file() for path in paths):
            return
        taken: list[int] = []
        for path in paths:
            ports = {}
            for port_name in Etcd.port_names:
                ports[port_name] = pick_free_port(Etcd.host, exclude=taken)
                taken.append(ports[port_name])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"ports": ports}, indent=1) + "\n")

    def formed(self, running: Sequence[Running], timeout: float) -> str:
        """Every member reports the same leader and the same member count."""
        leaders = {leader(member, timeout) for member in running}
        if len(leaders) != 1:
            raise ProbeError(f"members disagree on the leader: {sorted(leaders)}")
        return f"{len(running)} members, etcd {running[0].detail}"


def status_of(member: Running, timeout: float = 5.0) -> dict[str, object]:
    """The member's ``Maintenance.Status`` through the gRPC gateway (leader id, raft term)."""
    return _http_json(f"http://{member.host}:{member.port}/v3/maintenance/status", {}, timeout)


def leader(member: Running, timeout: float = 5.0) -> str:
    """The leader's member id as ``member`` sees it (``0`` or missing: no leader)."""
    found = str(status_of(member, timeout).get("leader", "0"))
    if found == "0":
        raise ProbeError(f"{member.address} has no leader")
    return found


def member_id(member: Running, timeout: float = 5.0) -> str:
    """The member's own id (what ``leader`` names)."""
    header = status_of(member, timeout).get("header", {})
    return str(header.get("member_id", "")) if isinstance(header, dict) else ""


def leader_index(group: RunningGroup, timeout: float = 5.0) -> int:
    """Which of the group's live members leads now."""
    ids: dict[str, int] = {}
    leaders: set[str] = set()
    for index, member in enumerate(group.members):
        if not member.is_alive():
            continue
        with contextlib.suppress(OSError, ProbeError):
            ids[member_id(member, timeout)] = index
            leaders.add(leader(member, timeout))
    if len(leaders) != 1 or next(iter(leaders)) not in ids:
        raise ProbeError(f"no single live leader: members {ids}, leaders seen {sorted(leaders)}")
    return ids[next(iter(leaders))]


def start(
    state_dir: Path | None = None, cache_dir: Path | None = None, *, timeout: float | None = None
) -> RunningGroup:
    """Start (or reuse) the three members under ``<state_dir>/etcd-cluster``."""
    return EtcdCluster(state_dir, cache_dir).start(timeout)


def attach(state_dir: Path | None = None) -> RunningGroup | None:
    """Handles on the running members (e.g. started by ``python -m e2e.infra up``)."""
    return EtcdCluster(state_dir).attach()
