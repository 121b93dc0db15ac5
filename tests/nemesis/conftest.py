"""Fixtures of the nemesis tests: a recording sink and a real cluster (api + workers
on Cassandra and etcd), torn down even when a test fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from e2e.cluster import Cluster, UnexpectedFaults
from e2e.sink import RecordingSink
from e2e.stores import CassandraAccess, EtcdAccess
from tests.conftest import require_stores

LEASE_TTL = 4

MakeCluster = Callable[..., Awaitable[Cluster]]


@pytest.fixture
async def sink() -> AsyncIterator[RecordingSink]:
    receiver = await RecordingSink().start()
    yield receiver
    await receiver.stop()


@pytest.fixture
async def make_cluster(tmp_path: Path) -> AsyncIterator[MakeCluster]:
    """`await make_cluster(workers=3, cassandra=..., etcd=...)`: started, all shards owned.
    Cassandra and etcd default to the servers CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD
    name (the single test servers, or the clusters' members), with the TLS and login
    their companion variables give (e2e/stores.py); `cassandra` and `etcd` may list
    several addresses, comma-separated, or be an access; the keyspace's replication
    factor defaults to 3 on three or more Cassandra nodes."""
    made: list[Cluster] = []

    async def make(
        workers: int,
        cassandra: str | CassandraAccess | None = None,
        etcd: str | EtcdAccess | None = None,
        shards: int = 16,
        replication_factor: int | None = None,
    ) -> Cluster:
        if cassandra is None or etcd is None:
            default_cassandra, default_etcd = require_stores()
            cassandra, etcd = cassandra or default_cassandra, etcd or default_etcd
        cluster = Cluster(
            tmp_path,
            cassandra,
            etcd,
            shards=shards,
            lease_ttl=LEASE_TTL,
            replication_factor=replication_factor,
        )
        made.append(cluster)
        await cluster.start(workers)
        return cluster

    yield make
    faults: list[UnexpectedFaults] = []
    for cluster in made:
        try:
            await cluster.stop()
        except UnexpectedFaults as exc:
            faults.append(exc)
    if faults:
        raise faults[0]
