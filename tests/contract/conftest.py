"""Every store implementation runs the same contract suite."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from clockwork_svc.abc import Store
from clockwork_svc.domain.model import ClusterLayout
from e2e.stores import CassandraAccess
from tests.conftest import require_server

# A large shard count lets tests pick fresh shards instead of resetting the store.
LAYOUT = ClusterLayout(shard_count=1 << 20, bucket_ms=60_000, created_ms=1_700_000_000_000)


def _run_outside_loop(coro: Coroutine[Any, Any, object]) -> None:
    """Run a coroutine to completion from sync code that may sit inside a running loop
    (the session fixture is first reached from the async `store` fixture)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


def _keyspace(env_var: str, replication_factor: int) -> Iterator[tuple[CassandraAccess, str]]:
    """One keyspace for the whole contract run (schema changes are slow in Cassandra)."""
    require_server(env_var)
    access = CassandraAccess.from_env(env_var)
    addresses = list(access.contact_points)
    from clockwork_svc.storage import cassandra

    keyspace = "contract_" + uuid.uuid4().hex[:12]
    _run_outside_loop(
        cassandra.create_cluster_for_tests(
            addresses, keyspace, LAYOUT, replication_factor, **access.connect_kwargs()
        )
    )
    yield access, keyspace
    _run_outside_loop(
        cassandra.drop_keyspace_for_tests(addresses, keyspace, **access.connect_kwargs())
    )


@pytest.fixture(scope="session")
def cassandra_keyspace() -> Iterator[tuple[CassandraAccess, str]]:
    """On the single test node."""
    yield from _keyspace("CLOCKWORK_CASSANDRA", 1)


@pytest.fixture(scope="session")
def cassandra_cluster_keyspace() -> Iterator[tuple[CassandraAccess, str]]:
    """On the three-node cluster, at replication factor 3 (production's topology),
    secured: TLS and a login (e2e/infra/cassandra_cluster.py)."""
    yield from _keyspace("CLOCKWORK_CASSANDRA_CLUSTER", 3)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("cassandra", marks=pytest.mark.cassandra),
        pytest.param("cassandra-rf3", marks=[pytest.mark.cassandra, pytest.mark.replicated]),
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        from clockwork_svc.storage.sqlite import SqliteStore

        sqlite_store = await SqliteStore.open(tmp_path / "contract.db", LAYOUT)
        yield sqlite_store
        await sqlite_store.close()
        return
    keyspace_fixture = (
        "cassandra_keyspace" if request.param == "cassandra" else "cassandra_cluster_keyspace"
    )
    access, keyspace = request.getfixturevalue(keyspace_fixture)
    from clockwork_svc.storage import cassandra

    cass_store = await cassandra.CassandraStore.open(
        list(access.contact_points), keyspace, **access.connect_kwargs()
    )
    yield cass_store
    await cass_store.close()
