"""Clockwork's own harness for the real servers its tests need.

``python -m e2e.infra up|down|status|fetch`` for people and CI; from Python::

    from e2e.infra import cassandra
    node = cassandra.start()          # Running: .host, .port, .stop(), .kill(), .restart()

Binaries are cached in ``$CLOCKWORK_INFRA_CACHE`` (default
``~/.cache/clockwork-infra``); running servers live in ``$CLOCKWORK_INFRA_STATE``
(default ``<repo>/.infra``).  Everything listens on free ports of 127.0.0.1; the
client ports of Cassandra, etcd and the apiserver also on the real node's pod gateway
(``podnet.GATEWAY``), where that node's pods reach them.
"""

from .server import InfraError, Running, Server, Status

__all__ = ["InfraError", "Running", "Server", "Status"]
