"""Behaviour of the Cassandra store beyond the shared contract (tests/contract):
partial rows, creates grouped per partition, firing TTLs and error mapping."""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from clockwork_svc.domain.model import Outcome, Progress
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage import cassandra
from clockwork_svc.storage.cassandra import bridge, connecting, rows
from clockwork_svc.storage.cassandra.store import _CAS_UNKNOWN_RETRIES, firing_ttl_s
from tests.conftest import require_server
from tests.contract.test_store_contract import make_schedule, make_tenant, record_progress
from tests.integration.test_cassandra_schema import LAYOUT, _firing, run_outside_loop

DAY_S = 86_400
RETENTION_S = 7 * DAY_S


@pytest.fixture(scope="module")
def keyspace() -> Iterator[tuple[str, str]]:
    address = require_server("CLOCKWORK_CASSANDRA")
    name = "store_" + uuid.uuid4().hex[:12]
    run_outside_loop(cassandra.create_cluster_for_tests([address], name, LAYOUT))
    yield address, name
    run_outside_loop(cassandra.drop_keyspace_for_tests([address], name))


@pytest.fixture
async def store(keyspace: tuple[str, str]) -> AsyncIterator[cassandra.CassandraStore]:
    address, name = keyspace
    opened = await cassandra.CassandraStore.open([address], name)
    yield opened
    await opened.close()


async def cql(keyspace: tuple[str, str], text: str, *params: Any) -> list[dict[str, Any]]:
    address, name = keyspace
    cluster, session = await connecting.connect([address], timeout_s=30)
    try:
        return await bridge.fetch(session, text.format(ks=name), params, max_rows=1000)
    finally:
        await connecting.shutdown(cluster)


@pytest.mark.cassandra
async def test_insert_succeeds_over_a_partial_row_left_by_progress(
    store: cassandra.CassandraStore,
) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    await record_progress(store, tenant, "k", Progress(5, 4, Outcome.SUCCEEDED, 3))
    assert await store.get_schedule(tenant, "k") is None
    assert await store.list_schedules(tenant, None, 10) == []
    s = make_schedule(tenant, "k")
    assert await store.insert_schedule(s) is None
    assert await store.get_schedule(tenant, "k") == s
    assert await store.insert_schedule(dataclasses.replace(s, id="other")) == s


@pytest.mark.cassandra
async def test_list_skips_rows_without_a_schedule_and_fills_the_page(
    store: cassandra.CassandraStore, keyspace: tuple[str, str]
) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    real = [f"k{i:02d}" for i in range(0, 20, 2)]
    for key in real:
        await store.insert_schedule(make_schedule(tenant, key))
    for key in (f"k{i:02d}" for i in range(1, 20, 2)):  # a worker's progress, no schedule
        await cql(
            keyspace,
            "UPDATE {ks}.schedules_by_part SET fired_count = 1 "
            "WHERE tenant = %s AND part = %s AND key = %s",
            *rows.schedule_key(tenant, key),
        )
    assert [s.key for s in await store.list_schedules(tenant, None, 4)] == real[:4]
    assert [s.key for s in await store.list_schedules(tenant, "k05", 100)] == real[3:]


def keys_in_one_part(n: int) -> list[str]:
    keys = (f"k{i:05d}" for i in range(100_000))
    return sorted(itertools.islice((k for k in keys if rows.schedule_part(k) == 0), n))


@pytest.mark.cassandra
async def test_creates_in_one_part_are_conditional_batches_that_name_the_taken_keys(
    store: cassandra.CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    keys = keys_in_one_part(70)
    earlier = make_schedule(tenant, keys[3], id="earlier")
    mine = make_schedule(tenant, keys[5], id="mine")  # a repeat of an applied create
    assert await store.insert_schedules([earlier, mine]) == [None, None]
    await record_progress(store, tenant, keys[9], Progress(5, 4, Outcome.SUCCEEDED, 3))
    batch = [make_schedule(tenant, k, id=f"new-{k}") for k in keys]
    batch[5] = mine
    batch.append(make_schedule(tenant, keys[20], id="twice"))
    rounds: list[int] = []
    send = store._cas_batch

    async def counted(statement: Any, params: Any) -> Any:
        rounds.append(len(params))
        return await send(statement, params)

    monkeypatch.setattr(store, "_cas_batch", counted)
    results = await store.insert_schedules(batch)
    assert results[3] == earlier
    assert results[5] is None
    assert (results[20] is None) != (results[70] is None)
    winner = batch[20] if results[20] is None else batch[70]
    assert {results[20], results[70]} == {None, winner}
    assert [r for i, r in enumerate(results) if i not in (3, 5, 20, 70)] == [None] * 67
    assert await store.get_schedule(tenant, keys[9]) == batch[9]
    assert await store.get_schedule(tenant, keys[20]) == winner
    listed = await store.list_schedules(tenant, None, 100)
    assert [s.key for s in listed] == keys
    # 70 keys, three batches (at most 32 rows and 24 KiB each): the first, holding the
    # two taken keys, was refused and went again without them; the second schedule of
    # keys[20] waited for a later round, alone (a single compare-and-set, not a batch).
    first, again, *rest = rounds
    assert again == first - 2 and first + sum(rest) == 70 and len(rest) == 2


@pytest.mark.cassandra
async def test_a_partition_whose_insert_fails_fails_only_its_own_schedules(
    store: cassandra.CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    batch = [make_schedule(tenant, f"k-{i:02d}", id=f"id-{i}") for i in range(40)]
    broken = rows.schedule_part(batch[0].key)
    insert_chunk = store._insert_chunk

    async def failing(chunk: Any) -> Any:
        if rows.schedule_part(chunk[0].schedule.key) == broken:
            raise StoreUnavailable("injected: CAS operation timed out")
        return await insert_chunk(chunk)

    monkeypatch.setattr(store, "_insert_chunk", failing)
    results = await store.insert_schedules(batch)
    lost = [s.key for s in batch if rows.schedule_part(s.key) == broken]
    assert 0 < len(lost) < len(batch)
    for s, answer in zip(batch, results, strict=True):
        if s.key in lost:
            assert isinstance(answer, StoreUnavailable), (s.key, answer)
            assert await store.get_schedule(tenant, s.key) is None
        else:
            assert answer is None, (s.key, answer)
            assert await store.get_schedule(tenant, s.key) == s
    with pytest.raises(StoreUnavailable, match="injected"):
        await store.insert_schedule(batch[0])
    monkeypatch.setattr(store, "_insert_chunk", insert_chunk)
    again = await store.insert_schedules(batch)
    assert again == [None] * len(batch)
    listed = await store.list_schedules(tenant, None, 100)
    assert [s.key for s in listed] == [s.key for s in batch]


@pytest.mark.cassandra
async def test_firing_rows_live_until_due_plus_retention(
    store: cassandra.CassandraStore, keyspace: tuple[str, str]
) -> None:
    now_ms = int(time.time() * 1000)
    shard = uuid.uuid4().int % LAYOUT.shard_count
    soon = _firing(shard, now_ms + DAY_S * 1000)
    past = _firing(shard, now_ms - 30 * DAY_S * 1000)
    far = _firing(shard, now_ms + 30 * 365 * DAY_S * 1000)  # beyond any TTL: none at all
    await store.put_firings([soon, past, far])
    await store.mark_done(soon)

    async def ttls(f: Any) -> dict[str, Any]:
        found = await cql(
            keyspace,
            "SELECT TTL(tenant) AS row_ttl, TTL(done) AS done_ttl FROM {ks}.firings "
            "WHERE shard = %s AND bucket = %s AND fire_at_ms = %s AND firing_id = %s",
            f.shard,
            f.fire_at_ms // LAYOUT.bucket_ms,
            f.fire_at_ms,
            f.firing_id,
        )
        return found[0]

    soon_ttls = await ttls(soon)
    assert abs(soon_ttls["row_ttl"] - (DAY_S + RETENTION_S)) < 60
    assert abs(soon_ttls["done_ttl"] - (DAY_S + RETENTION_S)) < 60
    assert abs((await ttls(past))["row_ttl"] - RETENTION_S) < 60
    assert (await ttls(far))["row_ttl"] is None
    got = await store.get_firing(shard, soon.fire_at_ms, soon.firing_id)
    assert got == dataclasses.replace(soon, done=True)


@pytest.mark.cassandra
async def test_mark_done_of_an_unknown_firing_is_invisible(store: cassandra.CassandraStore) -> None:
    shard = uuid.uuid4().int % LAYOUT.shard_count
    ghost = _firing(shard, 1_800_000_000_000)
    await store.mark_done(ghost)
    assert await store.get_firing(shard, ghost.fire_at_ms, ghost.firing_id) is None
    assert await store.scan_firings(shard, (ghost.fire_at_ms, ""), ghost.fire_at_ms + 1, 10) == []


def test_firing_ttl_is_time_until_due_plus_retention() -> None:
    now_s = 1_800_000_000.0
    assert firing_ttl_s(int(now_s * 1000) + 3_600_000, RETENTION_S, now_s) == 3600 + RETENTION_S
    assert firing_ttl_s(int(now_s * 1000) - 3_600_000, RETENTION_S, now_s) == RETENTION_S
    assert firing_ttl_s(int(now_s * 1000) + 1, RETENTION_S, now_s) == 1 + RETENTION_S


def test_firing_ttl_is_none_where_cassandra_cannot_expire_the_row() -> None:
    now_s = 1_800_000_000.0  # 2027
    twelve_years_ms = int((now_s + 12 * 365 * DAY_S) * 1000)  # past 2038-01-19
    assert firing_ttl_s(twelve_years_ms, RETENTION_S, now_s) == 0
    after_2038 = 2_200_000_000.0
    assert firing_ttl_s(int(after_2038 * 1000), RETENTION_S, after_2038) == RETENTION_S
    assert firing_ttl_s(int((after_2038 + 21 * 365 * DAY_S) * 1000), 1, after_2038) == 0


def test_driver_availability_errors_become_store_unavailable() -> None:
    by_name = {cls.__name__: cls for cls in bridge.UNAVAILABLE_ERRORS}
    timed_out = by_name["OperationTimedOut"]("no response")
    mapped = bridge.translate(timed_out)
    assert isinstance(mapped, StoreUnavailable)
    assert mapped.__cause__ is timed_out
    unavailable = by_name["NoHostAvailable"]("Unable to connect to any servers", {})
    assert isinstance(bridge.translate(unavailable), StoreUnavailable)
    bad_query = ValueError("not a driver availability error")
    assert bridge.translate(bad_query) is bad_query


def test_contact_points_parse() -> None:
    assert connecting.parse_contact_point("db:9043") == ("db", 9043)
    assert connecting.parse_contact_point("db") == ("db", 9042)
    assert connecting.parse_contact_point("[::1]:9044") == ("::1", 9044)
    for bad in ("", ":9042", "db:x", "db:70000", "[::1"):
        with pytest.raises(ValueError, match="contact point"):
            connecting.parse_contact_point(bad)


class LostAnswers:
    """Wraps a store's requests so that a compare-and-set's answer is lost once: the
    write reaches Cassandra (`after_write`) or not (before it), then the call raises
    "result unknown", as Cassandra does under Paxos contention."""

    def __init__(self, store: cassandra.CassandraStore, *, after_write: bool) -> None:
        self._real = store._run
        self._after_write = after_write
        self.lost = 0
        store._run = self._run  # type: ignore[method-assign]

    async def _run(
        self, statement: Any, params: Any, *, profile: Any = connecting.PROFILE_DEFAULT
    ) -> bridge.Page:
        if profile != connecting.PROFILE_LWT or self.lost:
            return await self._real(statement, params, profile=profile)
        self.lost += 1
        if self._after_write:
            await self._real(statement, params, profile=profile)
        raise bridge.CasResultUnknown("cassandra: compare-and-set result unknown (injected)")


@pytest.mark.cassandra
@pytest.mark.parametrize("after_write", [True, False], ids=["applied", "not-applied"])
async def test_a_compare_and_set_whose_answer_is_lost_is_told_apart_on_the_repeat(
    keyspace: tuple[str, str], after_write: bool
) -> None:
    address, name = keyspace
    t = "t-" + uuid.uuid4().hex[:8]
    shard = 1_000 + int(uuid.uuid4().int % 100_000)

    async def each(step: Any) -> Any:
        # A store of its own per step, so each step loses its first answer.
        opened = await cassandra.CassandraStore.open([address], name)
        lost = LostAnswers(opened, after_write=after_write)
        try:
            return await step(opened)
        finally:
            assert lost.lost == 1
            await opened.close()

    s = make_schedule(t, "k")
    assert await each(lambda st: st.insert_schedule(s)) is None
    paused = dataclasses.replace(s, version=2, updated_ms=s.updated_ms + 1, next_fire_ms=None)
    assert await each(lambda st: st.replace_schedule(paused, 1))
    assert await each(lambda st: st.acquire_shard(shard, 3)) is not None
    assert await each(lambda st: st.advance_cursor(shard, LAYOUT.created_ms + 5_000, 3))
    tenant_row = make_tenant(t)
    assert await each(lambda st: st.insert_tenant(tenant_row)) is None
    rotated = dataclasses.replace(tenant_row, version=2, signing_secrets=("whsec_bmV3",))
    assert await each(lambda st: st.replace_tenant(rotated, 1))

    async def read_back(st: cassandra.CassandraStore) -> None:
        assert await st.get_schedule(t, "k") == paused
        assert await st.get_tenant(t) == rotated
        cursor = await st.load_cursor(shard)
        assert cursor is not None and cursor.epoch == 3
        assert cursor.position_ms == LAYOUT.created_ms + 5_000
        # Someone else's write under the same key is still told apart from one's own.
        assert await st.insert_schedule(dataclasses.replace(s, id="other")) == paused

    opened = await cassandra.CassandraStore.open([address], name)
    try:
        await read_back(opened)
    finally:
        await opened.close()


@pytest.mark.cassandra
async def test_a_compare_and_set_that_stays_unknown_is_a_retryable_error(
    store: cassandra.CassandraStore,
) -> None:
    real = store._run
    tries = 0

    async def always_unknown(
        statement: Any, params: Any, *, profile: Any = connecting.PROFILE_DEFAULT
    ) -> bridge.Page:
        nonlocal tries
        if profile != connecting.PROFILE_LWT:
            return await real(statement, params, profile=profile)
        tries += 1
        raise bridge.CasResultUnknown("cassandra: compare-and-set result unknown (injected)")

    store._run = always_unknown  # type: ignore[method-assign]
    t = "t-" + uuid.uuid4().hex[:8]
    with pytest.raises(StoreUnavailable, match="result unknown"):
        await store.insert_schedule(make_schedule(t, "k"))
    assert tries == _CAS_UNKNOWN_RETRIES + 1
    store._run = real  # type: ignore[method-assign]
    assert await store.get_schedule(t, "k") is None
