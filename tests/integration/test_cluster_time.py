"""Cluster time on real Cassandra: a process whose host clock is far behind still
writes with timestamps Cassandra accepts (clockwork_svc/timekeeping.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.storage import cassandra
from clockwork_svc.timekeeping import StoreClock, WriteTimestamps
from tests.conftest import require_server

pytestmark = pytest.mark.cassandra

LAYOUT = ClusterLayout(shard_count=64, bucket_ms=60_000, created_ms=1_700_000_000_000)
HOUR_NS = 3_600 * 10**9


@pytest.fixture
async def keyspace() -> AsyncIterator[tuple[str, str]]:
    address = require_server("CLOCKWORK_CASSANDRA")
    name = "clocktime_" + uuid.uuid4().hex[:10]
    await cassandra.create_cluster_for_tests([address], name, LAYOUT)
    yield address, name
    await cassandra.drop_keyspace_for_tests([address], name)


async def test_a_host_an_hour_behind_writes_with_cluster_time(
    keyspace: tuple[str, str],
) -> None:
    """A worker on time blocks an ordering key (a retry is pending); the shard moves to
    a worker whose host is an hour behind, which delivers the retry and clears the
    block. Stamped with its host's clock, the clear would be older than the block and
    Cassandra would keep the block: the key would stay blocked for good."""
    address, name = keyspace
    on_time = await cassandra.CassandraStore.open([address], name)
    behind = StoreClock(wall_ns=lambda: time.time_ns() - HOUR_NS)
    worker = await cassandra.CassandraStore.open([address], name)
    naive = await cassandra.CassandraStore.open([address], name)
    try:
        await behind.sync(worker.server_time_ms)
        assert abs(behind.host_skew_ms() + 3_600_000) < 1_000
        assert abs(behind.now_ms() - await on_time.server_time_ms()) < 1_000
        worker.use_write_timestamps(WriteTimestamps(behind))
        # What the driver does by default on that host: stamp with the host's clock.
        naive.use_write_timestamps(lambda: (time.time_ns() - HOUR_NS) // 1_000)

        await on_time.set_ordering_block("t", "naive", "delivery-1")
        await naive.set_ordering_block("t", "naive", "")
        assert await on_time.get_ordering_block("t", "naive") == "delivery-1"

        await on_time.set_ordering_block("t", "cluster-time", "delivery-1")
        # The block carries this host's clock (the driver's default, like `naive`'s).
        # Cluster time is only known to within one round trip of the store's clock
        # (timekeeping.py), and a takeover takes seconds: the clear comes once cluster
        # time has passed the block's stamp, which takes milliseconds here (an hour if
        # cluster time were the host's clock).
        blocked_us = time.time_ns() // 1_000
        deadline = time.monotonic() + 1.0
        while behind.now_us() <= blocked_us:
            assert time.monotonic() < deadline, (behind.now_us(), blocked_us)
            await asyncio.sleep(0.001)
        await worker.set_ordering_block("t", "cluster-time", "")
        assert await on_time.get_ordering_block("t", "cluster-time") == ""
    finally:
        for store in (on_time, worker, naive):
            await store.close()
