"""Versioned schema migrations and the cluster layout record.

`MIGRATIONS` is append-only: each entry is `(version, name, statements)`, applied in
order and recorded in `schema_migrations`. Statements are `string.Template`s
(`$keyspace`, `$firing_retention_s`, `$execution_ttl_s`), not `str.format`, because
CQL maps use braces. Every statement is itself idempotent (`IF NOT EXISTS`), so a
migration interrupted half-way is simply applied again.

Table choices (see the design brief, "Data model (Cassandra)"):

* `schedules_by_part`: a tenant's schedules in `(tenant, part)` partitions, part =
  blake2b(key) % 64 (`rows.SCHEDULE_PARTS`), clustered by key. The creates of one batch
  that fall in one partition are one conditional batch, a single Paxos round (one per
  schedule costs 3-8x more); listing reads the partitions in key order, with no index
  table. Rows are overwritten by every fire (progress columns) and read on every API
  call: LeveledCompactionStrategy bounds the SSTables a read touches, at the cost of
  more compaction I/O. 64 partitions keep a tenant of 10M schedules at ~160k rows per
  partition. `schedules` and `schedule_index` (one partition per schedule, and a key
  index) are the layout before migration 8, no longer read or written; a keyspace
  created since BASELINE (below) does not have them.
* `firings`: `(shard, bucket)` partitions clustered by `(fire_at_ms, firing_id)`;
  TimeWindowCompactionStrategy (1-hour windows) and a per-row TTL = time until due +
  retention, so whole SSTables expire and are dropped instead of compacted. The table's
  `default_time_to_live` carries the retention setting (the store reads it at open).
  Nothing is ever deleted, so `gc_grace_seconds` only has to cover the hint window (3h).
* `shard_cursors`: one row per shard, changed only by compare-and-set (epoch fencing).
* `executions`: `(tenant, schedule_key)` partitions, newest first, TWCS (1-day windows)
  with the table's default TTL.
"""

from __future__ import annotations

import asyncio
import logging
import re
import string
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, connecting, node_settings
from clockwork_svc.storage.cassandra.connecting import PROFILE_LWT, PROFILE_SCHEMA
from clockwork_svc.storage.cassandra.rows import schedule_part
from clockwork_svc.storage.columns import markers

if TYPE_CHECKING:
    from clockwork_svc.settings import CassandraTlsSettings

log = logging.getLogger(__name__)

COPY_SCHEDULES = "copy schedules into schedules_by_part"
"""A migration step that is code, not CQL: `_copy_schedules`."""

Migration = tuple[int, str, list[str]]

_TTL_GC_GRACE_S = 3 * 3600

MIGRATIONS: list[Migration] = [
    (
        1,
        "initial",
        [
            """CREATE TABLE IF NOT EXISTS $keyspace.cluster_meta (
                id int PRIMARY KEY,
                shard_count int,
                bucket_ms bigint,
                created_ms bigint)""",
            """CREATE TABLE IF NOT EXISTS $keyspace.schedules (
                tenant text,
                key text,
                id text,
                spec text,
                payload blob,
                state text,
                version bigint,
                created_ms bigint,
                updated_ms bigint,
                shard int,
                next_fire_ms bigint,
                last_fire_ms bigint,
                last_outcome text,
                fired_count bigint,
                PRIMARY KEY ((tenant, key)))
            WITH compaction = {'class': 'LeveledCompactionStrategy'}""",
            """CREATE TABLE IF NOT EXISTS $keyspace.schedule_index (
                tenant text,
                part int,
                key text,
                PRIMARY KEY ((tenant, part), key))
            WITH CLUSTERING ORDER BY (key ASC)
            AND compaction = {'class': 'SizeTieredCompactionStrategy'}""",
            """CREATE TABLE IF NOT EXISTS $keyspace.firings (
                shard int,
                bucket bigint,
                fire_at_ms bigint,
                firing_id text,
                tenant text,
                schedule_key text,
                schedule_id text,
                version bigint,
                seq bigint,
                occurrence_ms bigint,
                attempt int,
                delivery_id text,
                done boolean,
                PRIMARY KEY ((shard, bucket), fire_at_ms, firing_id))
            WITH CLUSTERING ORDER BY (fire_at_ms ASC, firing_id ASC)
            AND compaction = {'class': 'TimeWindowCompactionStrategy',
                'compaction_window_unit': 'HOURS', 'compaction_window_size': '1'}
            AND default_time_to_live = $firing_retention_s
            AND gc_grace_seconds = $gc_grace_s""",
            """CREATE TABLE IF NOT EXISTS $keyspace.shard_cursors (
                shard int PRIMARY KEY,
                position_ms bigint,
                epoch bigint)""",
            """CREATE TABLE IF NOT EXISTS $keyspace.executions (
                tenant text,
                schedule_key text,
                started_ms bigint,
                firing_id text,
                delivery_id text,
                attempt int,
                occurrence_ms bigint,
                due_ms bigint,
                duration_ms bigint,
                outcome text,
                status_code int,
                error text,
                next_attempt_ms bigint,
                PRIMARY KEY ((tenant, schedule_key), started_ms, firing_id))
            WITH CLUSTERING ORDER BY (started_ms DESC, firing_id DESC)
            AND compaction = {'class': 'TimeWindowCompactionStrategy',
                'compaction_window_unit': 'DAYS', 'compaction_window_size': '1'}
            AND default_time_to_live = $execution_ttl_s
            AND gc_grace_seconds = $gc_grace_s""",
        ],
    ),
    (
        2,
        "tenants",
        [
            """CREATE TABLE IF NOT EXISTS $keyspace.tenants (
                name text PRIMARY KEY,
                created_ms bigint,
                updated_ms bigint,
                version bigint,
                signing_secrets list<text>,
                token_hashes list<text>)""",
            """CREATE TABLE IF NOT EXISTS $keyspace.tenant_tokens (
                token_hash text PRIMARY KEY,
                tenant text)""",
        ],
    ),
    (
        3,
        "dead_letters",
        [
            "ALTER TABLE $keyspace.firings ADD IF NOT EXISTS redrive bigint",
            # One partition per tenant and day (of dead_ms): listing a time range walks
            # its days; the TTL bounds how many there are.
            """CREATE TABLE IF NOT EXISTS $keyspace.dead_letters (
                tenant text,
                day int,
                dead_ms bigint,
                firing_id text,
                schedule_key text,
                schedule_id text,
                delivery_id text,
                shard int,
                seq bigint,
                occurrence_ms bigint,
                attempts int,
                last_status int,
                last_error text,
                redriven_ms bigint,
                PRIMARY KEY ((tenant, day), dead_ms, firing_id))
            WITH compaction = {'class': 'TimeWindowCompactionStrategy',
                'compaction_window_unit': 'DAYS', 'compaction_window_size': '1'}
            AND default_time_to_live = 2592000
            AND gc_grace_seconds = $gc_grace_s""",
        ],
    ),
    (4, "tenant_limits", ["ALTER TABLE $keyspace.tenants ADD IF NOT EXISTS limits text"]),
    (
        5,
        "ordering_keys",
        [
            "ALTER TABLE $keyspace.firings ADD IF NOT EXISTS ordering_key text",
            """CREATE TABLE IF NOT EXISTS $keyspace.ordering_blocks (
                tenant text,
                ordering_key text,
                delivery_id text,
                PRIMARY KEY ((tenant, ordering_key)))""",
        ],
    ),
    (6, "tenant_defaults", ["ALTER TABLE $keyspace.tenants ADD IF NOT EXISTS defaults text"]),
    (
        7,
        "completion_marker",
        [
            # A worker marks a version completed with a plain upsert, not a
            # compare-and-set: reads apply the marker only to that version (rows.py).
            "ALTER TABLE $keyspace.schedules ADD IF NOT EXISTS completed_version bigint",
            "ALTER TABLE $keyspace.schedules ADD IF NOT EXISTS completed_ms bigint",
        ],
    ),
    (
        8,
        "schedules_by_part",
        [
            # A tenant's schedules in SCHEDULE_PARTS partitions clustered by key: the
            # creates of a batch that share a partition are one conditional batch
            # (one Paxos round), and listing reads the partitions in key order.
            """CREATE TABLE IF NOT EXISTS $keyspace.schedules_by_part (
                tenant text,
                part int,
                key text,
                id text,
                spec text,
                payload blob,
                state text,
                version bigint,
                created_ms bigint,
                updated_ms bigint,
                shard int,
                next_fire_ms bigint,
                last_fire_ms bigint,
                last_outcome text,
                fired_count bigint,
                completed_version bigint,
                completed_ms bigint,
                PRIMARY KEY ((tenant, part), key))
            WITH CLUSTERING ORDER BY (key ASC)
            AND compaction = {'class': 'LeveledCompactionStrategy'}""",
            COPY_SCHEDULES,
        ],
    ),
    (
        9,
        "trigger_now",
        [
            # A trigger-now's own payload, carried by its firings and its dead letter.
            "ALTER TABLE $keyspace.firings ADD IF NOT EXISTS payload blob",
            "ALTER TABLE $keyspace.dead_letters ADD IF NOT EXISTS payload blob",
            # Trigger-now request ids, kept as long as their firings (per-row TTL).
            """CREATE TABLE IF NOT EXISTS $keyspace.trigger_requests (
                tenant text,
                key text,
                request_id text,
                shard int,
                fire_at_ms bigint,
                firing_id text,
                delivery_id text,
                version bigint,
                created_ms bigint,
                written boolean,
                PRIMARY KEY ((tenant, key), request_id))
            WITH gc_grace_seconds = $gc_grace_s""",
        ],
    ),
    (
        10,
        "pause_notes",
        [
            "ALTER TABLE $keyspace.schedules_by_part ADD IF NOT EXISTS note text",
            "ALTER TABLE $keyspace.schedules_by_part ADD IF NOT EXISTS failures_in_row bigint",
        ],
    ),
    (
        11,
        "response_capture",
        [
            "ALTER TABLE $keyspace.executions ADD IF NOT EXISTS response_body blob",
            # A JSON list of [name, value] pairs.
            "ALTER TABLE $keyspace.executions ADD IF NOT EXISTS response_headers text",
        ],
    ),
    (
        12,
        "labels",
        [
            # `key=value` strings; the storage-attached index answers a search's
            # equality terms within one (tenant, part) partition (no table scan).
            "ALTER TABLE $keyspace.schedules_by_part ADD IF NOT EXISTS labels list<text>",
            "CREATE CUSTOM INDEX IF NOT EXISTS schedules_by_part_labels "
            "ON $keyspace.schedules_by_part (labels) USING 'StorageAttachedIndex'",
        ],
    ),
    (
        13,
        "overlap",
        ["ALTER TABLE $keyspace.firings ADD IF NOT EXISTS overlap text"],
    ),
    (
        14,
        "trace_context",
        ["ALTER TABLE $keyspace.schedules_by_part ADD IF NOT EXISTS trace_parent text"],
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]

BASELINE: Migration = (
    14,
    "baseline",
    [
        """CREATE TABLE IF NOT EXISTS $keyspace.cluster_meta (
            id int PRIMARY KEY,
            shard_count int,
            bucket_ms bigint,
            created_ms bigint)""",
        """CREATE TABLE IF NOT EXISTS $keyspace.schedules_by_part (
            tenant text,
            part int,
            key text,
            id text,
            spec text,
            payload blob,
            state text,
            version bigint,
            created_ms bigint,
            updated_ms bigint,
            shard int,
            next_fire_ms bigint,
            last_fire_ms bigint,
            last_outcome text,
            fired_count bigint,
            completed_version bigint,
            completed_ms bigint,
            note text,
            failures_in_row bigint,
            labels list<text>,
            trace_parent text,
            PRIMARY KEY ((tenant, part), key))
        WITH CLUSTERING ORDER BY (key ASC)
        AND compaction = {'class': 'LeveledCompactionStrategy'}""",
        "CREATE CUSTOM INDEX IF NOT EXISTS schedules_by_part_labels "
        "ON $keyspace.schedules_by_part (labels) USING 'StorageAttachedIndex'",
        """CREATE TABLE IF NOT EXISTS $keyspace.firings (
            shard int,
            bucket bigint,
            fire_at_ms bigint,
            firing_id text,
            tenant text,
            schedule_key text,
            schedule_id text,
            version bigint,
            seq bigint,
            occurrence_ms bigint,
            attempt int,
            delivery_id text,
            done boolean,
            redrive bigint,
            ordering_key text,
            payload blob,
            overlap text,
            PRIMARY KEY ((shard, bucket), fire_at_ms, firing_id))
        WITH CLUSTERING ORDER BY (fire_at_ms ASC, firing_id ASC)
        AND compaction = {'class': 'TimeWindowCompactionStrategy',
            'compaction_window_unit': 'HOURS', 'compaction_window_size': '1'}
        AND default_time_to_live = $firing_retention_s
        AND gc_grace_seconds = $gc_grace_s""",
        """CREATE TABLE IF NOT EXISTS $keyspace.shard_cursors (
            shard int PRIMARY KEY,
            position_ms bigint,
            epoch bigint)""",
        """CREATE TABLE IF NOT EXISTS $keyspace.executions (
            tenant text,
            schedule_key text,
            started_ms bigint,
            firing_id text,
            delivery_id text,
            attempt int,
            occurrence_ms bigint,
            due_ms bigint,
            duration_ms bigint,
            outcome text,
            status_code int,
            error text,
            next_attempt_ms bigint,
            response_body blob,
            response_headers text,
            PRIMARY KEY ((tenant, schedule_key), started_ms, firing_id))
        WITH CLUSTERING ORDER BY (started_ms DESC, firing_id DESC)
        AND compaction = {'class': 'TimeWindowCompactionStrategy',
            'compaction_window_unit': 'DAYS', 'compaction_window_size': '1'}
        AND default_time_to_live = $execution_ttl_s
        AND gc_grace_seconds = $gc_grace_s""",
        """CREATE TABLE IF NOT EXISTS $keyspace.tenants (
            name text PRIMARY KEY,
            created_ms bigint,
            updated_ms bigint,
            version bigint,
            signing_secrets list<text>,
            token_hashes list<text>,
            limits text,
            defaults text)""",
        """CREATE TABLE IF NOT EXISTS $keyspace.tenant_tokens (
            token_hash text PRIMARY KEY,
            tenant text)""",
        """CREATE TABLE IF NOT EXISTS $keyspace.dead_letters (
            tenant text,
            day int,
            dead_ms bigint,
            firing_id text,
            schedule_key text,
            schedule_id text,
            delivery_id text,
            shard int,
            seq bigint,
            occurrence_ms bigint,
            attempts int,
            last_status int,
            last_error text,
            redriven_ms bigint,
            payload blob,
            PRIMARY KEY ((tenant, day), dead_ms, firing_id))
        WITH compaction = {'class': 'TimeWindowCompactionStrategy',
            'compaction_window_unit': 'DAYS', 'compaction_window_size': '1'}
        AND default_time_to_live = 2592000
        AND gc_grace_seconds = $gc_grace_s""",
        """CREATE TABLE IF NOT EXISTS $keyspace.ordering_blocks (
            tenant text,
            ordering_key text,
            delivery_id text,
            PRIMARY KEY ((tenant, ordering_key)))""",
        """CREATE TABLE IF NOT EXISTS $keyspace.trigger_requests (
            tenant text,
            key text,
            request_id text,
            shard int,
            fire_at_ms bigint,
            firing_id text,
            delivery_id text,
            version bigint,
            created_ms bigint,
            written boolean,
            PRIMARY KEY ((tenant, key), request_id))
        WITH gc_grace_seconds = $gc_grace_s""",
    ],
)
"""The schema the migrations up to this version leave, less the tables nothing reads
any more (`schedules`, `schedule_index`), created at once in a new keyspace (the
migrations are recorded as applied; later ones then run as usual): 13 DDL statements
instead of 30, each of which waits for every node to agree on the schema (~1.2 s each
on the harness's three-node cluster). `test_cassandra_schema` checks that it equals
the migrations' result."""

# Tables whose default TTL follows a migrate() argument (kept in step on every run).
_TTL_TABLES = {"firings": "firing_retention_s", "executions": "execution_ttl_s"}

_KEYSPACE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_REPLICATION_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_TTL_S = 20 * 365 * 86_400


def check_keyspace(keyspace: str) -> str:
    """Keyspace names are interpolated into CQL: only a plain identifier is accepted."""
    if not _KEYSPACE_PATTERN.match(keyspace):
        raise ValueError(f"invalid keyspace name {keyspace!r}: letters, digits, _; max 48")
    return keyspace


def _replication_cql(replication: Mapping[str, object]) -> str:
    if "class" not in replication:
        raise ValueError("replication needs a 'class' (SimpleStrategy, NetworkTopologyStrategy)")
    items = []
    for key, value in replication.items():
        text = str(value)
        if not _REPLICATION_KEY.match(key) or not _REPLICATION_KEY.match(text):
            raise ValueError(f"invalid replication entry {key!r}: {value!r}")
        items.append(f"'{key}': '{text}'")
    return "{" + ", ".join(items) + "}"


def render(statement: str, keyspace: str, ttls: Mapping[str, int]) -> str:
    return string.Template(statement).substitute(
        keyspace=keyspace, gc_grace_s=_TTL_GC_GRACE_S, **ttls
    )


async def migrate(
    contact_points: list[str],
    keyspace: str,
    *,
    replication: dict[str, object],
    layout: ClusterLayout,
    firing_retention_s: int = 7 * 86400,
    execution_ttl_s: int = 7 * 86400,
    local_dc: str | None = None,
    username: str | None = None,
    password: str | None = None,
    tls: CassandraTlsSettings | None = None,
    connect_timeout_s: float = 60.0,
) -> list[str]:
    """Create the keyspace if absent, apply pending migrations, record the layout.

    A new keyspace gets BASELINE's schema at once, then any later migration. Returns
    the names (`"0001_initial"`) of the migrations applied (or recorded as applied by
    BASELINE) by this call; a second run returns `[]`. The layout is written once
    (compare-and-set): if the cluster already has one, it is kept (logged when it
    differs from `layout`). The tables' default TTLs are set to the given retention
    on every run.

    Run it from one place at a time (a deploy job): concurrent DDL from several
    clients can make Cassandra disagree on table ids. It first logs what in the
    nodes' settings would hurt Clockwork (`node_settings`), as every store that opens
    does.
    """
    check_keyspace(keyspace)
    ttls = {"firing_retention_s": firing_retention_s, "execution_ttl_s": execution_ttl_s}
    for name, value in ttls.items():
        if not 0 < value <= _MAX_TTL_S:
            raise ValueError(f"{name} must be in 1..{_MAX_TTL_S}, got {value}")
    replication_cql = _replication_cql(replication)
    cluster, session = await connecting.connect(
        contact_points,
        local_dc=local_dc,
        username=username,
        password=password,
        tls=tls,
        timeout_s=connect_timeout_s,
    )
    try:
        await node_settings.check(cluster, session)
        await _ddl_on_one_node(
            cluster,
            session,
            [
                f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication_cql}",
                f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations "
                "(version int PRIMARY KEY, name text, applied_ms bigint)",
            ],
        )
        applied = await applied_versions(session, keyspace)
        done: list[str] = []
        if await _is_new(session, keyspace, applied):
            log.info("keyspace %s: creating the schema of migration %04d", keyspace, BASELINE[0])
            await _ddl_on_one_node(
                cluster, session, [render(statement, keyspace, ttls) for statement in BASELINE[2]]
            )
            for version, name, _ in MIGRATIONS:
                if version <= BASELINE[0]:
                    await _record(session, keyspace, version, name)
                    applied.add(version)
                    done.append(f"{version:04d}_{name}")
        for version, name, statements in MIGRATIONS:
            if version in applied:
                continue
            log.info("applying migration %04d_%s to keyspace %s", version, name, keyspace)
            for statement in statements:
                if statement == COPY_SCHEDULES:
                    await _copy_schedules(session, keyspace)
                else:
                    await _ddl(session, render(statement, keyspace, ttls))
            await _record(session, keyspace, version, name)
            done.append(f"{version:04d}_{name}")
        await _sync_ttls(session, keyspace, ttls)
        await _wait_for_schema_agreement(cluster)
        await _write_layout(session, keyspace, layout)
        return done
    finally:
        await connecting.shutdown(cluster)


# The columns of `schedules` as migration 8 found them: spelled out, not taken from
# `columns.SCHEDULES`, which follows the current schema.
_COPIED_COLUMNS = (
    "tenant, key, id, spec, payload, state, version, created_ms, updated_ms, shard, "
    "next_fire_ms, last_fire_ms, last_outcome, fired_count, completed_version, completed_ms"
)


async def _copy_schedules(session: Any, keyspace: str) -> None:
    """Every schedule of `schedules` into `schedules_by_part`, as plain upserts of the
    same values: a copy interrupted half-way is simply made again. The api and workers
    of a build before this migration must be stopped while it runs (their writes go to
    `schedules` only)."""
    insert = await asyncio.to_thread(
        session.prepare,
        f"INSERT INTO {keyspace}.schedules_by_part (part, {_COPIED_COLUMNS}) "
        f"VALUES ({markers(_COPIED_COLUMNS.count(',') + 2)})",
    )
    copied = 0
    async for page in bridge.pages(
        session, f"SELECT {_COPIED_COLUMNS} FROM {keyspace}.schedules", max_rows=2**62
    ):
        # A row without an id is a progress write for a schedule that was never
        # created (see rows.is_schedule): nothing to copy.
        found = [r for r in page if r["id"] is not None]
        await bridge.gather_bounded(
            (
                bridge.execute(session, insert, (schedule_part(r["key"]), *r.values()))
                for r in found
            ),
            64,
        )
        copied += len(found)
    log.info("keyspace %s: %d schedules copied into schedules_by_part", keyspace, copied)


async def _is_new(session: Any, keyspace: str, applied: set[int]) -> bool:
    """No migration applied and no table but `schema_migrations`: BASELINE applies (if
    the migrations reach its version). A keyspace a migration left half-made replays
    the migrations, whose statements repeat harmlessly."""
    if applied or not MIGRATIONS or MIGRATIONS[-1][0] < BASELINE[0]:
        return False
    rows = await bridge.fetch(
        session,
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s",
        (keyspace,),
        max_rows=1000,
    )
    return {r["table_name"] for r in rows} <= {"schema_migrations"}


async def _record(session: Any, keyspace: str, version: int, name: str) -> None:
    await bridge.execute(
        session,
        f"INSERT INTO {keyspace}.schema_migrations (version, name, applied_ms) VALUES (%s, %s, %s)",
        (version, name, int(time.time() * 1000)),
    )


async def applied_versions(session: Any, keyspace: str) -> set[int]:
    rows = await bridge.fetch(
        session, f"SELECT version FROM {keyspace}.schema_migrations", max_rows=10_000
    )
    return {int(r["version"]) for r in rows}


async def _ddl(session: Any, cql: str) -> None:
    await bridge.execute(session, cql, profile=PROFILE_SCHEMA)


async def _ddl_on_one_node(cluster: Any, session: Any, statements: Sequence[str]) -> None:
    """Run `statements` in order on one node, then wait once for every node to agree.

    The driver otherwise waits for agreement after each statement, about a second each
    on a three-node cluster. The node is the driver's control connection's, as the
    agreement check reads that node's view of every node's schema version: a node that
    has not applied the statements yet would see the others agree on the old schema.
    One coordinator applies the statements in order, so a statement that needs an
    earlier one's table (an index) finds it there. Without a control connection the
    statements go one by one, each waited for. If the control connection moves to
    another node meanwhile, its view proves nothing: StoreUnavailable, and migrate,
    whose statements all repeat harmlessly, is run again."""
    coordinator = cluster.get_control_connection_host()
    if coordinator is None or not coordinator.is_up:
        for cql in statements:
            await _ddl(session, cql)
        return
    wait_s = cluster.max_schema_agreement_wait
    cluster.max_schema_agreement_wait = 0
    try:
        for cql in statements:
            await bridge.execute(session, cql, profile=PROFILE_SCHEMA, host=coordinator)
    finally:
        cluster.max_schema_agreement_wait = wait_s
    await _wait_for_schema_agreement(cluster)
    if cluster.get_control_connection_host() is not coordinator:
        raise StoreUnavailable(
            f"the driver's control connection left {coordinator} during a schema change; "
            "run the migration again"
        )


async def _sync_ttls(session: Any, keyspace: str, ttls: Mapping[str, int]) -> None:
    for table, setting in _TTL_TABLES.items():
        row = await bridge.first(
            session,
            "SELECT default_time_to_live FROM system_schema.tables "
            "WHERE keyspace_name = %s AND table_name = %s",
            (keyspace, table),
        )
        wanted = ttls[setting]
        if row is not None and row["default_time_to_live"] != wanted:
            log.info(
                "%s.%s: default_time_to_live %s -> %s",
                keyspace,
                table,
                row["default_time_to_live"],
                wanted,
            )
            await _ddl(
                session, f"ALTER TABLE {keyspace}.{table} WITH default_time_to_live = {wanted}"
            )


async def _wait_for_schema_agreement(cluster: Any) -> None:
    agreed = await asyncio.to_thread(cluster.control_connection.wait_for_schema_agreement)
    if not agreed:
        raise StoreUnavailable("Cassandra nodes did not agree on the schema in time")


async def _write_layout(session: Any, keyspace: str, layout: ClusterLayout) -> None:
    page = await bridge.execute(
        session,
        f"INSERT INTO {keyspace}.cluster_meta (id, shard_count, bucket_ms, created_ms) "
        "VALUES (1, %s, %s, %s) IF NOT EXISTS",
        (layout.shard_count, layout.bucket_ms, layout.created_ms),
        profile=PROFILE_LWT,
    )
    row = page.rows[0]
    if row["[applied]"]:
        log.info("keyspace %s: cluster layout set to %s", keyspace, layout)
        return
    existing = ClusterLayout(int(row["shard_count"]), int(row["bucket_ms"]), int(row["created_ms"]))
    if (existing.shard_count, existing.bucket_ms) != (layout.shard_count, layout.bucket_ms):
        log.warning(
            "keyspace %s keeps its layout %s (fixed at creation); ignoring %s",
            keyspace,
            existing,
            layout,
        )


async def load_layout(session: Any, keyspace: str) -> ClusterLayout | None:
    row = await bridge.first(
        session,
        f"SELECT shard_count, bucket_ms, created_ms FROM {keyspace}.cluster_meta WHERE id = 1",
    )
    if row is None:
        return None
    return ClusterLayout(int(row["shard_count"]), int(row["bucket_ms"]), int(row["created_ms"]))


async def create_cluster_for_tests(
    contact_points: list[str],
    keyspace: str,
    layout: ClusterLayout,
    replication_factor: int = 1,
    *,
    username: str | None = None,
    password: str | None = None,
    tls: CassandraTlsSettings | None = None,
) -> list[str]:
    """A throwaway keyspace (SimpleStrategy, replication factor 1 unless told)."""
    return await migrate(
        contact_points,
        keyspace,
        replication={"class": "SimpleStrategy", "replication_factor": replication_factor},
        layout=layout,
        username=username,
        password=password,
        tls=tls,
    )


async def drop_keyspace_for_tests(
    contact_points: Sequence[str],
    keyspace: str,
    *,
    username: str | None = None,
    password: str | None = None,
    tls: CassandraTlsSettings | None = None,
) -> None:
    check_keyspace(keyspace)
    cluster, session = await connecting.connect(
        contact_points, username=username, password=password, tls=tls, timeout_s=30.0
    )
    try:
        await _ddl(session, f"DROP KEYSPACE IF EXISTS {keyspace}")
    finally:
        await connecting.shutdown(cluster)
