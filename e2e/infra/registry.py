"""The server types the harness knows, in start order (stopped in reverse).

Adding a server type (etcd, Kafka, kube-apiserver) means one module with a
:class:`~e2e.infra.server.Server` subclass and one entry here. A group of several
members of one type (:mod:`e2e.infra.group`) is listed in ``GROUPS``: started only
when named, stopped by a plain ``down``.
"""

from __future__ import annotations

from .cassandra import Cassandra
from .cassandra_cluster import CassandraCluster
from .etcd import Etcd
from .etcd_cluster import EtcdCluster
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

GROUPS: dict[str, type[ServerGroup]] = {
    CassandraCluster.name: CassandraCluster,
    EtcdCluster.name: EtcdCluster,
}
