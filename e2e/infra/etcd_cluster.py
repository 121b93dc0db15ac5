"""Three etcd members on this machine: the topology production runs.

The members differ only in name, ports and data directory, and all start at once
with the same ``--initial-cluster`` list. Unlike the single test member, they keep
etcd's own raft timing (100 ms heartbeat, 1 s election timeout): a follower that
stops hearing from its leader for a second starts an election, as in production.

The members are secured as production's should be, like the single secured member
(etcd_secure.py): clients and peers speak TLS only, each side showing a certificate
the CA signed (``--client-cert-auth``, ``--peer-client-cert-auth``); authentication is
on, with a ``clockwork`` user whose role may read and write only under
``/clockwork``. One CA and its certificates serve the three members, in
``<state>/etcd-cluster/pki``.

Clients get every member's address (``CLOCKWORK_ETCD_CLUSTER``) and, beside it, the
CA and the ``clockwork`` client certificate (``CLOCKWORK_ETCD_CLUSTER_TLS_CA``,
``_TLS_CERT``, ``_TLS_KEY``: etcd takes the user from the certificate's CN).
Clockwork's client fails over between the members
(clockwork_svc/coordination/endpoints.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .etcd import Etcd
from .etcd_secure import CLOCKWORK_USER, SecureEtcd, with_flags
from .group import RunningGroup, ServerGroup
from .process import pick_free_port
from .server import InfraError, LaunchSpec, ProbeError, Running

SIZE = 3
ENV_VAR = "CLOCKWORK_ETCD_CLUSTER"
CLUSTER_TOKEN = "clockwork-test-cluster"


def member_name(index: int) -> str:
    return f"member{index + 1}"


class ClusterMember(SecureEtcd):
    """One member of the group, secured; its peers' URLs are read from their recorded
    ports. The group sets up users and roles once all three have formed a cluster."""

    def __init__(self, members_dir: Path, cache_dir: Path | None, *, index: int) -> None:
        self.name = member_name(index)
        self.index = index
        self.peers: Sequence[ClusterMember] = ()
        """Every member of the group, this one included, in order (set by the group)."""
        super().__init__(members_dir, cache_dir)

    @property
    def pki_dir(self) -> Path:
        """The group's certificates, shared by its members."""
        return self.state_dir.parent / "pki"

    def start(self, timeout: float | None = None) -> Running:
        """Start (or reuse) the member; users and roles are the group's business."""
        return Etcd.start(self, timeout)

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        """The secured member's command line, its peer traffic over TLS too."""
        peer = f"https://{self.host}:{ports['peer']}"
        return with_flags(
            super().configure(ports),
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            "--peer-client-cert-auth",
            f"--peer-trusted-ca-file={self.pki_dir / 'ca.crt'}",
            f"--peer-cert-file={self.pki_dir / 'server.crt'}",
            f"--peer-key-file={self.pki_dir / 'server.key'}",
        )

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {}  # the group publishes one line for all its members

    def _membership(self, peer_url: str) -> list[str]:
        urls = []
        for peer in self.peers:
            ports = peer.stored_ports()
            assert ports is not None, f"{peer.name}'s ports are not recorded"
            urls.append(f"{peer.name}=https://{peer.host}:{ports['peer']}")
        cluster = ",".join(urls)
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
        self._members = [ClusterMember(self.members_dir, cache_dir, index=i) for i in range(SIZE)]
        for member in self._members:
            member.peers = self._members

    @property
    def members(self) -> Sequence[ClusterMember]:
        return self._members

    def start(self, timeout: float | None = None) -> RunningGroup:
        """Make the certificates, start the members, then (once) users, roles, auth on."""
        self._members[0].make_pki()  # once, before three members start at once
        group = super().start(timeout)
        self._members[0].enable_auth_once(group.members[0].port, self.dir)
        return group

    def client_env(self) -> dict[str, str]:
        pki_dir = self._members[0].pki_dir
        return {
            f"{ENV_VAR}_TLS_CA": str(pki_dir / "ca.crt"),
            f"{ENV_VAR}_TLS_CERT": str(pki_dir / f"{CLOCKWORK_USER}.crt"),
            f"{ENV_VAR}_TLS_KEY": str(pki_dir / f"{CLOCKWORK_USER}.key"),
        }

    def choose_ports(self) -> list[dict[str, int]]:
        """Two ports per member, all different (they share 127.0.0.1)."""
        taken: list[int] = []
        chosen = []
        for _ in self._members:
            ports = {}
            for port_name in Etcd.port_names:
                ports[port_name] = pick_free_port(Etcd.host, exclude=taken)
                taken.append(ports[port_name])
            chosen.append(ports)
        return chosen

    def formed(self, running: Sequence[Running], timeout: float) -> str:
        """Every member reports the same leader and the same member count."""
        leaders = {leader(member, timeout) for member in running}
        if len(leaders) != 1:
            raise ProbeError(f"members disagree on the leader: {sorted(leaders)}")
        return f"{len(running)} members, etcd {running[0].detail}"


def status_of(member: Running, timeout: float = 5.0) -> dict[str, object]:
    """The member's ``Maintenance.Status`` (leader id, raft term), asked by etcdctl as
    ``root``: the gRPC gateway ignores a client certificate's CN, so with
    authentication on it answers only callers with a password token."""
    server = member.server
    assert isinstance(server, ClusterMember)
    try:
        out = server.etcdctl(
            member.port, f"--command-timeout={timeout:g}s", "endpoint", "status", "-w", "json"
        )
        statuses = json.loads(out)
    except (InfraError, ValueError) as exc:
        raise ProbeError(f"{member.address}: {exc}") from exc
    if not isinstance(statuses, list) or not statuses or "Status" not in statuses[0]:
        raise ProbeError(f"{member.address}: endpoint status answered {out[:200]!r}")
    status = statuses[0]["Status"]
    assert isinstance(status, dict)
    return status


def _leader_of(status: Mapping[str, object], address: str) -> str:
    found = str(status.get("leader", 0))
    if found == "0":
        raise ProbeError(f"{address} has no leader")
    return found


def leader(member: Running, timeout: float = 5.0) -> str:
    """The leader's member id as ``member`` sees it (``0`` or missing: no leader)."""
    return _leader_of(status_of(member, timeout), member.address)


def leader_index(group: RunningGroup, timeout: float = 5.0) -> int:
    """Which of the group's live members leads now (one status read per member)."""
    ids: dict[str, int] = {}
    leaders: set[str] = set()
    for index, member in enumerate(group.members):
        if not member.is_alive():
            continue
        with contextlib.suppress(OSError, ProbeError):
            status = status_of(member, timeout)
            header = status.get("header")
            if isinstance(header, dict):
                ids[str(header.get("member_id", ""))] = index
            leaders.add(_leader_of(status, member.address))
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
