"""The Cassandra store: the only package in Clockwork that imports `cassandra`.

* `store`: `CassandraStore`, the `clockwork_svc.abc.Store` implementation;
* `schema`: versioned migrations (`MIGRATIONS`, `migrate`) and test keyspaces;
* `bridge`: `execute_async` bridged to asyncio, paging, error mapping;
* `connecting`: driver configuration, TLS, start-up retries and refusals;
* `rows`: rows to records and back.
"""

from __future__ import annotations

from clockwork_svc.storage.cassandra.schema import (
    MIGRATIONS,
    create_cluster_for_tests,
    drop_keyspace_for_tests,
    migrate,
)
from clockwork_svc.storage.cassandra.store import CassandraStore

__all__ = [
    "MIGRATIONS",
    "CassandraStore",
    "create_cluster_for_tests",
    "drop_keyspace_for_tests",
    "migrate",
]
