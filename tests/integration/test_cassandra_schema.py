"""The Cassandra store's schema, start-up and asyncio bridge, against a real Cassandra."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from clockwork_svc.domain import identity, planning
from clockwork_svc.domain.model import ClusterLayout, Firing
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.domain.triggers import OnceTrigger
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage import cassandra
from clockwork_svc.storage.cassandra import bridge, connecting, schema
from clockwork_svc.storage.columns import FIRINGS, SCHEDULES
from tests.conftest import require_server
from tests.contract.test_store_contract import make_firing

T = TypeVar("T")

LAYOUT = ClusterLayout(shard_count=4096, bucket_ms=60_000, created_ms=1_700_000_000_000)
T0 = 1_800_000_000_000


def run_outside_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Sync fixtures may be set up while an event loop runs (async tests)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="module")
def keyspace() -> Iterator[tuple[str, str]]:
    address = require_server("CLOCKWORK_CASSANDRA")
    name = "schema_" + uuid.uuid4().hex[:12]
    applied = run_outside_loop(cassandra.create_cluster_for_tests([address], name, LAYOUT))
    assert applied == [f"{v:04d}_{n}" for v, n, _ in cassandra.MIGRATIONS]
    yield address, name
    run_outside_loop(cassandra.drop_keyspace_for_tests([address], name))


@pytest.fixture
async def store(keyspace: tuple[str, str]) -> AsyncIterator[cassandra.CassandraStore]:
    address, name = keyspace
    opened = await cassandra.CassandraStore.open([address], name)
    yield opened
    await opened.close()


async def query(address: str, cql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    cluster, session = await connecting.connect([address], timeout_s=30)
    try:
        return await bridge.fetch(session, cql, params, max_rows=1000)
    finally:
        await connecting.shutdown(cluster)


@pytest.mark.cassandra
async def test_a_second_migrate_applies_nothing(keyspace: tuple[str, str]) -> None:
    address, name = keyspace
    again = await cassandra.migrate(
        [address],
        name,
        replication={"class": "SimpleStrategy", "replication_factor": 1},
        layout=LAYOUT,
    )
    assert again == []
    rows = await query(address, f"SELECT version, name FROM {name}.schema_migrations")
    assert sorted((r["version"], r["name"]) for r in rows) == [
        (v, n) for v, n, _ in cassandra.MIGRATIONS
    ]


REPLICATION = {"class": "SimpleStrategy", "replication_factor": 1}


def applied_from(version: int) -> list[str]:
    """What `migrate` reports applying from `version` on."""
    return [f"{v:04d}_{name}" for v, name, _ in cassandra.MIGRATIONS if v >= version]


async def migrated_before(version: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A new keyspace with the migrations before `version` applied: (address, keyspace)."""
    address = require_server("CLOCKWORK_CASSANDRA")
    name = "schema_" + uuid.uuid4().hex[:12]
    with monkeypatch.context() as patched:
        patched.setattr(schema, "MIGRATIONS", [m for m in cassandra.MIGRATIONS if m[0] < version])
        await cassandra.migrate([address], name, replication=REPLICATION, layout=LAYOUT)
    return address, name


async def described(address: str, keyspace: str) -> dict[str, Any]:
    """What Cassandra holds of a keyspace's schema, without its names and ids: each
    table's options, each column's type, kind and place, each index."""
    tables = {
        r.pop("table_name"): {k: v for k, v in r.items() if k not in ("keyspace_name", "id")}
        for r in await query(
            address, "SELECT * FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
        )
    }
    columns = {
        (r["table_name"], r["column_name"], r["kind"], r["position"], r["type"])
        for r in await query(
            address, "SELECT * FROM system_schema.columns WHERE keyspace_name = %s", (keyspace,)
        )
    }
    indexes = {
        (r["table_name"], r["index_name"], r["kind"], str(sorted(r["options"].items())))
        for r in await query(
            address, "SELECT * FROM system_schema.indexes WHERE keyspace_name = %s", (keyspace,)
        )
    }
    return {"tables": tables, "columns": columns, "indexes": indexes}


@pytest.mark.cassandra
async def test_a_new_keyspace_gets_the_schema_the_migrations_make(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = require_server("CLOCKWORK_CASSANDRA")
    new, replayed = ("schema_" + uuid.uuid4().hex[:12] for _ in range(2))
    try:
        assert await cassandra.migrate(
            [address], new, replication=REPLICATION, layout=LAYOUT
        ) == applied_from(1)
        with monkeypatch.context() as patched:

            async def not_new(*_: object) -> bool:
                return False

            patched.setattr(schema, "_is_new", not_new)  # every migration, one by one
            assert await cassandra.migrate(
                [address], replayed, replication=REPLICATION, layout=LAYOUT
            ) == applied_from(1)
        made, expected = await described(address, new), await described(address, replayed)
        # Only the migrations leave the tables nothing reads any more.
        legacy = {"schedules", "schedule_index"}
        assert set(expected["tables"]) - set(made["tables"]) == legacy
        for table in legacy:
            del expected["tables"][table]
        expected["columns"] = {c for c in expected["columns"] if c[0] not in legacy}
        assert made == expected
        # A migrate of the new keyspace finds everything applied.
        again = await cassandra.migrate([address], new, replication=REPLICATION, layout=LAYOUT)
        assert again == []
    finally:
        for name in (new, replayed):
            await cassandra.drop_keyspace_for_tests([address], name)


@pytest.mark.cassandra
async def test_a_keyspace_a_first_migrate_left_half_made_replays_the_migrations() -> None:
    address = require_server("CLOCKWORK_CASSANDRA")
    name = "schema_" + uuid.uuid4().hex[:12]
    cluster, session = await connecting.connect([address], timeout_s=30)
    try:
        # As a first migrate of a build before BASELINE leaves it if stopped after a table.
        await bridge.execute(
            session,
            f"CREATE KEYSPACE {name} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        )
        await bridge.execute(session, f"CREATE TABLE {name}.firings (shard int PRIMARY KEY)")
    finally:
        await connecting.shutdown(cluster)
    try:
        applied = await cassandra.migrate([address], name, replication=REPLICATION, layout=LAYOUT)
        assert applied == applied_from(1)
        tables = await query(
            address, "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (name,)
        )
        assert {"schedules", "schedule_index"} <= {r["table_name"] for r in tables}
    finally:
        await cassandra.drop_keyspace_for_tests([address], name)


@pytest.mark.cassandra
async def test_migration_8_copies_the_schedules_into_their_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address, name = await migrated_before(8, monkeypatch)
    try:
        spec = ScheduleSpec(OnceTrigger(T0 + 60_000), HttpTarget("http://127.0.0.1:9/x"))
        old = [
            planning.new_schedule("t", f"k{i:03d}", spec, f"id{i}", T0, LAYOUT)[0]
            for i in range(150)
        ]
        cluster, session = await connecting.connect([address], timeout_s=30)
        try:
            # The columns `schedules` had (the later ones exist in schedules_by_part only).
            columns = SCHEDULES.columns[: SCHEDULES.columns.index("fired_count") + 1]
            insert = (
                f"INSERT INTO {name}.schedules ({', '.join(columns)}) "
                f"VALUES ({', '.join(['%s'] * len(columns))})"
            )
            for s in old:
                await bridge.execute(session, insert, SCHEDULES.encode(s)[: len(columns)])
            # A worker's progress for a schedule never created: not a schedule.
            await bridge.execute(
                session,
                f"UPDATE {name}.schedules SET fired_count = 1 WHERE tenant = 't' AND key = 'x'",
            )
        finally:
            await connecting.shutdown(cluster)
        applied = await cassandra.migrate([address], name, replication=REPLICATION, layout=LAYOUT)
        assert applied == applied_from(8)
        store = await cassandra.CassandraStore.open([address], name)
        try:
            assert await store.list_schedules("t", None, 1000) == old
            assert await store.get_schedule("t", "k007") == old[7]
            assert await store.get_schedule("t", "x") is None
        finally:
            await store.close()
    finally:
        await cassandra.drop_keyspace_for_tests([address], name)


@pytest.mark.cassandra
async def test_firings_written_before_migration_9_read_without_a_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address, name = await migrated_before(9, monkeypatch)
    try:
        old = make_firing(5, T0)
        columns = [c for c in FIRINGS.columns if c not in ("payload", "overlap")]
        values = [
            v
            for c, v in zip(FIRINGS.columns, FIRINGS.encode(old), strict=True)
            if c not in ("payload", "overlap")
        ]
        cluster, session = await connecting.connect([address], timeout_s=30)
        try:
            await bridge.execute(
                session,
                f"INSERT INTO {name}.firings (bucket, {', '.join(columns)}) "
                f"VALUES ({', '.join(['%s'] * (len(columns) + 1))})",
                (T0 // LAYOUT.bucket_ms, *values),
            )
        finally:
            await connecting.shutdown(cluster)
        applied = await cassandra.migrate([address], name, replication=REPLICATION, layout=LAYOUT)
        assert applied == applied_from(9)
        store = await cassandra.CassandraStore.open([address], name)
        try:
            assert await store.scan_firings(5, (T0 - 1, ""), T0 + 1, 10) == [old]
        finally:
            await store.close()
    finally:
        await cassandra.drop_keyspace_for_tests([address], name)


@pytest.mark.cassandra
async def test_the_layout_is_fixed_at_creation(keyspace: tuple[str, str]) -> None:
    address, name = keyspace
    other = ClusterLayout(shard_count=8, bucket_ms=1000, created_ms=LAYOUT.created_ms + 1)
    await cassandra.migrate(
        [address],
        name,
        replication={"class": "SimpleStrategy", "replication_factor": 1},
        layout=other,
    )
    store = await cassandra.CassandraStore.open([address], name)
    try:
        assert await store.layout() == LAYOUT
    finally:
        await store.close()


@pytest.mark.cassandra
async def test_tables_have_the_intended_compaction_and_ttls(keyspace: tuple[str, str]) -> None:
    address, name = keyspace
    rows = await query(
        address,
        "SELECT table_name, compaction, default_time_to_live, gc_grace_seconds "
        "FROM system_schema.tables WHERE keyspace_name = %s",
        (name,),
    )
    tables = {r["table_name"]: r for r in rows}
    assert set(tables) == {
        "cluster_meta",
        "schedules_by_part",
        "firings",
        "shard_cursors",
        "executions",
        "schema_migrations",
        "tenants",
        "tenant_tokens",
        "dead_letters",
        "ordering_blocks",
        "trigger_requests",
    }

    def strategy(table: str) -> str:
        return str(tables[table]["compaction"]["class"]).rsplit(".", 1)[-1]

    assert strategy("schedules_by_part") == "LeveledCompactionStrategy"
    firings = tables["firings"]
    assert strategy("firings") == "TimeWindowCompactionStrategy"
    assert firings["compaction"]["compaction_window_unit"] == "HOURS"
    assert firings["compaction"]["compaction_window_size"] == "1"
    assert firings["default_time_to_live"] == 7 * 86_400
    executions = tables["executions"]
    assert strategy("executions") == "TimeWindowCompactionStrategy"
    assert executions["compaction"]["compaction_window_unit"] == "DAYS"
    assert executions["default_time_to_live"] == 7 * 86_400
    assert firings["gc_grace_seconds"] == executions["gc_grace_seconds"] == 3 * 3600
    assert strategy("dead_letters") == "TimeWindowCompactionStrategy"
    assert tables["dead_letters"]["default_time_to_live"] == 30 * 86_400
    # Request ids expire with a per-row TTL (no longer than their firings').
    assert tables["trigger_requests"]["gc_grace_seconds"] == 3 * 3600


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_open_against_a_closed_port_fails_within_its_timeout() -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=address) as caught:
        await cassandra.CassandraStore.open([address], "clockwork", connect_timeout_s=2.0)
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 4.0, elapsed  # retried until the timeout, not much longer
    assert caught.value.__cause__ is not None


async def test_open_rejects_an_unsafe_keyspace_name() -> None:
    with pytest.raises(ValueError, match="keyspace"):
        await cassandra.CassandraStore.open(["127.0.0.1:1"], "x; DROP KEYSPACE y")


@pytest.mark.cassandra
async def test_open_without_schema_says_to_migrate() -> None:
    address = require_server("CLOCKWORK_CASSANDRA")
    with pytest.raises(StoreUnavailable, match="migrate"):
        await cassandra.CassandraStore.open([address], "no_such_keyspace_" + uuid.uuid4().hex[:8])


@pytest.mark.cassandra
async def test_a_long_scan_does_not_block_the_event_loop(
    store: cassandra.CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = uuid.uuid4().int % LAYOUT.shard_count
    count = 20_000
    firings = [_firing(shard, T0 + i * 5) for i in range(count)]  # 2 buckets
    await store.put_firings(firings)

    pages_followed = 0
    real_execute = bridge.execute

    async def counting_execute(*args: Any, **kwargs: Any) -> bridge.Page:
        nonlocal pages_followed
        if kwargs.get("paging_state") is not None:
            pages_followed += 1
        return await real_execute(*args, **kwargs)

    monkeypatch.setattr(bridge, "execute", counting_execute)

    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker(), name="ticker")
    started = time.monotonic()
    got = await store.scan_firings(shard, (T0, ""), T0 + count * 5, count)
    duration = time.monotonic() - started
    stop.set()
    await ticking

    assert len(got) == count
    assert [f.sort_key for f in got] == sorted(f.sort_key for f in firings)
    assert pages_followed >= 2  # 12,000 and 8,000 rows in pages of 5,000
    # The loop kept running throughout the scan: no single step held it for a large part
    # of the scan (a synchronous fetch of all pages would hold it for nearly all of it).
    # Relative, not absolute: on a loaded shared machine one page's conversion alone can
    # take a few hundred ms.
    assert len(gaps) >= duration / 0.05, (len(gaps), duration)
    assert max(gaps) < 0.6 * duration, (max(gaps), duration)


def _firing(shard: int, fire_at_ms: int) -> Firing:
    sid = uuid.uuid4().hex
    return Firing(
        shard=shard,
        fire_at_ms=fire_at_ms,
        firing_id=identity.firing_id(sid, 1, fire_at_ms, 1),
        tenant="t",
        schedule_key="k",
        schedule_id=sid,
        version=1,
        seq=0,
        occurrence_ms=fire_at_ms,
        attempt=1,
        delivery_id=identity.delivery_id(sid, fire_at_ms),
    )
