"""Coalesced schedule reads (storage/cassandra/read_batcher.py) on real Cassandra:
reads issued together go as one request per tenant, each caller gets its own row (or
None), repeated keys are served once, and an error reaches every caller."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import connecting
from clockwork_svc.storage.cassandra.read_batcher import ScheduleReads
from clockwork_svc.storage.cassandra.store import CassandraStore
from tests.conftest import require_server
from tests.contract.conftest import LAYOUT
from tests.contract.test_store_contract import make_schedule

pytestmark = pytest.mark.cassandra


@pytest.fixture
async def store() -> AsyncIterator[CassandraStore]:
    from clockwork_svc.storage import cassandra

    address = require_server("CLOCKWORK_CASSANDRA")
    keyspace = "reads_" + uuid.uuid4().hex[:10]
    await cassandra.create_cluster_for_tests([address], keyspace, LAYOUT)
    opened = await CassandraStore.open([address], keyspace)
    yield opened
    await opened.close()
    await cassandra.drop_keyspace_for_tests([address], keyspace)


def reads_of(store: CassandraStore) -> ScheduleReads:
    reads: ScheduleReads = store._schedule_reads
    return reads


async def test_reads_issued_together_are_one_request_per_tenant(store: CassandraStore) -> None:
    schedules = [make_schedule(t, f"key-{i}") for t in ("ta", "tb") for i in range(40)]
    for s in schedules:
        assert await store.insert_schedule(s) is None
    reads = reads_of(store)
    before = reads.requests_sent
    asked = [(s.tenant, s.key) for s in schedules] + [("ta", "missing"), ("ta", "key-3")]
    got = await asyncio.gather(*(store.get_schedule(t, k) for t, k in asked))
    by_key = {(s.tenant, s.key): s for s in schedules}
    for (t, k), schedule in zip(asked, got, strict=True):
        assert schedule == by_key.get((t, k)), (t, k)
    # 40 keys per tenant, under the 64-key cap: one request each.
    assert reads.requests_sent - before == 2


async def test_more_keys_than_the_cap_are_split(store: CassandraStore) -> None:
    schedules = [make_schedule("tc", f"k{i:03d}") for i in range(150)]
    for s in schedules:
        await store.insert_schedule(s)
    reads = reads_of(store)
    before = reads.requests_sent
    got = await asyncio.gather(*(store.get_schedule("tc", s.key) for s in schedules))
    assert got == schedules
    assert reads.requests_sent - before == 3  # 64 + 64 + 22


async def test_a_read_after_a_write_sees_the_write(store: CassandraStore) -> None:
    s = make_schedule("td", "k")
    await store.insert_schedule(s)
    changed = dataclasses.replace(s, version=2, updated_ms=s.updated_ms + 1)
    assert await store.replace_schedule(changed, 1)
    assert await store.get_schedule("td", "k") == changed


async def test_an_unreachable_cluster_fails_every_read(store: CassandraStore) -> None:
    address = require_server("CLOCKWORK_CASSANDRA")
    cluster, session = await connecting.connect([address], timeout_s=60)
    statement: Any = store._st.select_schedules
    prepared = await asyncio.to_thread(session.prepare, statement.query_string)
    await connecting.shutdown(cluster)
    reads = ScheduleReads(session, prepared)
    results = await asyncio.gather(
        *(reads.get("t", f"k{i}") for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, StoreUnavailable) for r in results), results


async def test_a_linger_gathers_reads_of_later_turns() -> None:
    """A worker's reads come a few per event-loop turn; with a linger, reads issued
    over several turns within it share one request (with none, one each)."""
    from clockwork_svc.storage import cassandra

    address = require_server("CLOCKWORK_CASSANDRA")
    keyspace = "reads_" + uuid.uuid4().hex[:10]
    await cassandra.create_cluster_for_tests([address], keyspace, LAYOUT)
    try:
        for linger_s, requests in ((0.0, 5), (0.5, 1)):
            store = await CassandraStore.open([address], keyspace, read_linger_s=linger_s)
            try:
                schedules = [make_schedule("tl", f"k{linger_s}-{i}") for i in range(5)]
                for s in schedules:
                    await store.insert_schedule(s)
                reads = reads_of(store)
                before = reads.requests_sent
                pending = []
                for s in schedules:  # one read per turn
                    pending.append(asyncio.ensure_future(store.get_schedule("tl", s.key)))
                    await asyncio.sleep(0)
                assert await asyncio.gather(*pending) == schedules
                assert reads.requests_sent - before == requests, linger_s
            finally:
                await store.close()
    finally:
        await cassandra.drop_keyspace_for_tests([address], keyspace)
