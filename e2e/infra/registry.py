"""The server types the harness knows, in start order (stopped in reverse).

Adding a server type (etcd, Kafka, kube-apiserver) means one module with a
:class:`~e2e.infra.server.Server` subclass and one entry here.
"""

from __future__ import annotations

from .cassandra import Cassandra
from .etcd import Etcd
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
