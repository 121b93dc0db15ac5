"""Three Cassandra nodes on this machine: the topology production runs (replication factor 3).

Each node has a loopback address of its own (127.0.0.2, .3, .4: every address in
127.0.0.0/8 is local on Linux) and the same two ports, a data directory of its own
and a 1 GiB heap. The cluster starts empty with its topology given, as ccm starts
one: one token per node spread evenly over the Murmur3 range and
``auto_bootstrap: false``, so all three start at once and none streams from
another. The first node is the seed.

Unlike the single test node, these run as production is told to
(docs/operations.md): the ``periodic`` commit log (synced every 10 s; a kill -9 of
one node loses its unsynced writes, which its two replicas still hold), hinted
handoff on (a node that comes back is sent the writes it missed), and a stopping
node announces its shutdown to its peers.

The nodes are secured as production's should be, like the single secured node
(cassandra_secure.py): client encryption required (TLS only, client certificates
checked), ``PasswordAuthenticator`` and ``CassandraAuthorizer``; the roles' keyspace
``system_auth`` at replication factor 3, and a ``clockwork`` login role. One CA and
one server certificate (valid for 127.0.0.1-4) serve the three nodes, in
``<state>/cassandra-cluster/pki``.

Clients get every node's address (``CLOCKWORK_CASSANDRA_CLUSTER``) and, beside it,
the login and certificates (``CLOCKWORK_CASSANDRA_CLUSTER_TLS_CA``, ``_USER``, ...:
e2e/stores.py reads them); a keyspace for this cluster is created with replication
factor 3.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import cql
from .cassandra import HEAP, Cassandra, CommitlogSync
from .cassandra_secure import SUPERUSER, Pki, SecureCassandra, client_env
from .group import RunningGroup, ServerGroup
from .process import pick_free_port, port_is_free
from .server import ProbeError, Running

SIZE = 3
ADDRESSES = tuple(f"127.0.0.{index + 2}" for index in range(SIZE))
ENV_VAR = "CLOCKWORK_CASSANDRA_CLUSTER"
CLUSTER_NAME = "clockwork-test-cluster"
DEFAULT_COMMITLOG_SYNC: CommitlogSync = "periodic"
"""Production's: docs/operations.md tells users to run it."""


def token(index: int, size: int = SIZE) -> int:
    """Node ``index``'s token: the Murmur3 range [-2**63, 2**63) cut into ``size`` equal parts."""
    return -(2**63) + index * (2**64 // size)


class ClusterNode(SecureCassandra):
    """One node of the group, on its own loopback address, with its token given,
    secured; the group creates the roles once all three have formed a cluster."""

    announce_shutdown = True

    def __init__(
        self,
        members_dir: Path,
        cache_dir: Path | None,
        *,
        index: int,
        heap: str,
        commitlog_sync: CommitlogSync,
    ) -> None:
        self.name = f"node{index + 1}"
        self.host = ADDRESSES[index]
        self.index = index
        super().__init__(members_dir, cache_dir, heap=heap, commitlog_sync=commitlog_sync)

    @property
    def pki(self) -> Pki:
        """The group's certificates, shared by its nodes."""
        return Pki(self.state_dir.parent / "pki")

    def start(self, timeout: float | None = None) -> Running:
        """Start (or reuse) the node; roles are the group's business (``provision``)."""
        return Cassandra.start(self, timeout)

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {}  # the group publishes one line for all its nodes

    def _topology_yaml(self, storage_port: int) -> str:
        return f"""\
cluster_name: "{CLUSTER_NAME}"
listen_address: {self.host}
rpc_address: {self.host}
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{ADDRESSES[0]}:{storage_port}"
# A fresh cluster with its tokens given: nothing to stream at first start.
auto_bootstrap: false
initial_token: {token(self.index)}
# A node that was down is sent what it missed (within max_hint_window, 3 h).
hinted_handoff_enabled: true"""


class CassandraCluster(ServerGroup):
    """Three nodes, one cluster; ``start()`` returns when each node knows the other two."""

    name = "cassandra-cluster"
    env_var = ENV_VAR

    def __init__(
        self,
        state_dir: Path | None = None,
        cache_dir: Path | None = None,
        *,
        heap: str = HEAP,
        commitlog_sync: CommitlogSync = DEFAULT_COMMITLOG_SYNC,
    ) -> None:
        super().__init__(state_dir, cache_dir)
        self._nodes = [
            ClusterNode(
                self.members_dir, cache_dir, index=i, heap=heap, commitlog_sync=commitlog_sync
            )
            for i in range(SIZE)
        ]

    @property
    def members(self) -> Sequence[ClusterNode]:
        return self._nodes

    def choose_ports(self) -> list[dict[str, int]]:
        """The same two ports on every node's address, free on all of them."""
        ports: dict[str, int] = {}
        for port_name in Cassandra.port_names:
            while True:
                port = pick_free_port(ADDRESSES[0], exclude=list(ports.values()))
                if all(port_is_free(port, address) for address in ADDRESSES):
                    ports[port_name] = port
                    break
        return [dict(ports) for _ in self._nodes]

    def start(self, timeout: float | None = None) -> RunningGroup:
        """Make the certificates, start the nodes, create Clockwork's role."""
        self._nodes[0].make_pki()  # once, before three nodes start at once
        group = super().start(timeout)
        self._nodes[0].provision(group.members[0].port, system_auth_replication=SIZE)
        return group

    def client_env(self) -> dict[str, str]:
        return client_env(ENV_VAR, self._nodes[0].pki)

    def formed(self, running: Sequence[Running], timeout: float) -> str:
        """Every node answers CQL and lists the other nodes among its peers."""
        context = self._nodes[0].pki.client_context()
        for node in running:
            peers = cql.peer_count(node.host, node.port, timeout, tls=context, login=SUPERUSER)
            if peers != len(running) - 1:
                raise ProbeError(f"{node.host} knows {peers} peers, not {len(running) - 1}")
        return f"{len(running)} nodes, Cassandra {running[0].detail}"


def unsettled(
    contact_points: Sequence[tuple[str, int]],
    timeout: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: cql.Login | None = None,
) -> list[str]:
    """What keeps the nodes from being settled: hints not yet replayed, or nodes that
    disagree on the schema. Empty once settled.

    Dropping a keyspace while hints for one of its tables are still being replayed
    can leave the receiving node on an old schema version (Cassandra 5.0.9's
    MigrationStage fails with "Unknown CF" in the drop, and every later schema change
    is then unknown to that node), so test teardown waits for this before a drop."""
    found: list[str] = []
    versions: set[bytes] = set()
    for host, port in contact_points:
        try:
            hinted = cql.hinted_nodes(host, port, timeout, tls=tls, login=login)
            versions |= cql.schema_versions(host, port, timeout, tls=tls, login=login)
        except (OSError, cql.CqlError) as exc:
            found.append(f"{host} does not answer ({exc})")
            continue
        if hinted:
            found.append(f"{host} holds hints for {hinted} node(s)")
    if len(versions) > 1:
        found.append(f"the nodes see {len(versions)} schema versions")
    return found


def start(
    state_dir: Path | None = None,
    cache_dir: Path | None = None,
    *,
    timeout: float | None = None,
    commitlog_sync: CommitlogSync = DEFAULT_COMMITLOG_SYNC,
) -> RunningGroup:
    """Start (or reuse) the three nodes under ``<state_dir>/cassandra-cluster``."""
    return CassandraCluster(state_dir, cache_dir, commitlog_sync=commitlog_sync).start(timeout)


def attach(state_dir: Path | None = None) -> RunningGroup | None:
    """Handles on the running nodes (e.g. started by ``python -m e2e.infra up``)."""
    return CassandraCluster(state_dir).attach()
