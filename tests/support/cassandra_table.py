"""A throwaway table on the harness's Cassandra, for tests of the driver-facing code
(the bridge, the write batcher) below the store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from clockwork_svc.storage.cassandra import bridge, connecting
from tests.conftest import require_server


@asynccontextmanager
async def scratch_table(
    prefix: str, speculative_delay_s: float = 0.0
) -> AsyncIterator[tuple[Any, str]]:
    """(session, table name): `t(k text, c int, v text, primary key (k, c))` in a keyspace
    of its own (replication factor 1), dropped afterwards with the session."""
    address = require_server("CLOCKWORK_CASSANDRA")
    cluster, session = await connecting.connect(
        [address], timeout_s=60, speculative_delay_s=speculative_delay_s
    )
    ks = prefix + uuid.uuid4().hex[:10]
    profile = connecting.PROFILE_SCHEMA
    await bridge.execute(
        session,
        f"CREATE KEYSPACE {ks} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        profile=profile,
    )
    name = f"{ks}.t"
    await bridge.execute(
        session, f"CREATE TABLE {name} (k text, c int, v text, PRIMARY KEY (k, c))", profile=profile
    )
    try:
        yield session, name
    finally:
        await bridge.execute(session, f"DROP KEYSPACE {ks}", profile=profile)
        await connecting.shutdown(cluster)
