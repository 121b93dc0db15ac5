"""The server types the harness knows, in start order (stopped in reverse).

Adding a server type (etcd, Kafka, kube-apiserver) means one module with a
:class:`~e2e.infra.server.Server` subclass and one entry here. A group of several
members of one type (:mod:`e2e.infra.group`) is listed in ``GROUPS``: started only
when named, stopped by a plain ``down``.
"""

from __future__ import annotations

from .cassandra import Cassandra
from .cassandra_cluster import CassandraCluster
from .cassandra_secure import SecureCassandra
from .etcd import Etcd
from .etcd_cluster import EtcdCluster
from .etcd_secure import SecureEtcd
from .group import ServerGroup
from .kafka import Kafka
from .kube import Kube
from .node import Node
from .server import Server

SERVERS: dict[str, type[Server]] = {
    Cassandra.name: Cassandra,
    Etcd.name: Etcd,
    Kafka.name: Kafka,
    Kube.name: Kube,
    Node.name: Node,
}

NAMED_ONLY: dict[str, type[Server]] = {
    SecureCassandra.name: SecureCassandra,
    SecureEtcd.name: SecureEtcd,
}
"""Single servers started only when named (the secured variants the security tests
start themselves), stopped by a plain ``down``."""

GROUPS: dict[str, type[ServerGroup]] = {
    CassandraCluster.name: CassandraCluster,
    EtcdCluster.name: EtcdCluster,
}
