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
from tests.conftest import require_server

# A large shard count lets tests pick fresh shards instead of resetting the store.
LAYOUT = ClusterLayout(shard_count=1 << 20, bucket_ms=60_000, created_ms=1_700_000_000_000)


def _run_outside_loop(coro: Coroutine[Any, Any, object]) -> None:
    """Run a coroutine to completion from sync code that may sit inside a running loop
    (the session fixture is first reached from the async `store` fixture)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def cassandra_keyspace() -> Iterator[tuple[str, str]]:
    """One keyspace for the whole contract run (schema changes are slow in Cassandra)."""
    address = require_server("CLOCKWORK_CASSANDRA")
    from clockwork_svc.storage import cassandra

    keyspace = "contract_" + uuid.uuid4().hex[:12]
    _run_outside_loop(cassandra.create_cluster_for_tests([address], keyspace, LAYOUT))
    yield address, keyspace
    _run_outside_loop(cassandra.drop_keyspace_for_tests([address], keyspace))


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        from clockwork_svc.storage.sqlite import SqliteStore

        sqlite_store = await SqliteStore.open(tmp_path / "contract.db", LAYOUT)
        yield sqlite_store
        await sqlite_store.close()
        return
    address, keyspace = request.getfixturevalue("cassandra_keyspace")
    from clockwork_svc.storage import cassandra

    cass_store = await cassandra.CassandraStore.open([address], keyspace)
    yield cass_store
    await cass_store.close()
