"""The harness's own `e2e.cluster.Cluster` (used by the fault tests, the soak and the
benchmarks) cleans up after itself: its keyspace is gone once it stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from clockwork_svc.storage.cassandra import bridge, connecting
from e2e.cluster import Cluster
from tests.conftest import require_server

pytestmark = [pytest.mark.cassandra]


async def keyspaces(address: str) -> set[str]:
    cluster, session = await connecting.connect([address], timeout_s=30.0)
    try:
        page = await bridge.execute(session, "SELECT keyspace_name FROM system_schema.keyspaces")
        return {row["keyspace_name"] for row in page.rows}
    finally:
        await connecting.shutdown(cluster)


async def test_a_stopped_cluster_leaves_no_keyspace_behind(tmp_path: Path) -> None:
    address = require_server("CLOCKWORK_CASSANDRA")
    cluster = Cluster(tmp_path, address, require_server("CLOCKWORK_ETCD"), shards=4)
    await cluster.migrate()
    assert cluster.keyspace in await keyspaces(address)
    await cluster.stop()
    assert cluster.keyspace not in await keyspaces(address)
