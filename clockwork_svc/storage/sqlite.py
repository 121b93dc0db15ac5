"""The embedded store: one SQLite file, used by `clockwork dev`.

It implements the same contract as the Cassandra store (tests/contract runs both).
SQLite calls block, so every call runs on one dedicated thread that owns the
connection; the event loop only awaits. WAL journaling with synchronous=FULL makes
an acknowledged write survive a `kill -9` (and a power loss).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self, TypeVar

from clockwork_svc.abc import SystemClock
from clockwork_svc.domain import labels as labels_codec
from clockwork_svc.domain.identity import bucket_of
from clockwork_svc.domain.labels import Labels
from clockwork_svc.domain.model import (
    TRIGGER_REQUEST_TTL_MS,
    ClusterLayout,
    DeadLetter,
    Execution,
    Firing,
    FiringKey,
    FiringRecord,
    Progress,
    Schedule,
    ScheduleQuery,
    ScheduleState,
    SearchPage,
    ShardCursor,
    TriggerRequest,
)
from clockwork_svc.domain.tenant import Tenant
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.columns import (
    DEAD_LETTERS,
    EXECUTIONS,
    FIRINGS,
    PROGRESS,
    SCHEDULE_CHANGE,
    SCHEDULES,
    TENANTS,
    TRIGGER_REQUESTS,
    Table,
    assignments,
    markers,
    progress_values,
)

T = TypeVar("T")
R = TypeVar("R")

# A label search lets SQLite check the selector's `key=value` terms on up to this many
# times a search's budget of rows per call: checked in C, a row costs a small
# fraction of one decoded and checked in Python.
LABEL_SCAN_FACTOR = 10

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    shard_count INTEGER NOT NULL, bucket_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS schedules (
    tenant TEXT NOT NULL, key TEXT NOT NULL, id TEXT NOT NULL, spec TEXT NOT NULL,
    payload BLOB NOT NULL, state TEXT NOT NULL, version INTEGER NOT NULL,
    created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, shard INTEGER NOT NULL,
    next_fire_ms INTEGER, last_fire_ms INTEGER, last_outcome TEXT,
    fired_count INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '',
    failures_in_row INTEGER NOT NULL DEFAULT 0, labels TEXT NOT NULL DEFAULT '[]',
    trace_parent TEXT,
    PRIMARY KEY (tenant, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS firings (
    shard INTEGER NOT NULL, bucket INTEGER NOT NULL, fire_at_ms INTEGER NOT NULL,
    firing_id TEXT NOT NULL, tenant TEXT NOT NULL, schedule_key TEXT NOT NULL,
    schedule_id TEXT NOT NULL, version INTEGER NOT NULL, seq INTEGER NOT NULL,
    occurrence_ms INTEGER NOT NULL, attempt INTEGER NOT NULL, delivery_id TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0, redrive INTEGER NOT NULL DEFAULT 0,
    ordering_key TEXT NOT NULL DEFAULT '', payload BLOB,
    overlap TEXT NOT NULL DEFAULT 'allow_all',
    PRIMARY KEY (shard, fire_at_ms, firing_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
    version INTEGER NOT NULL, signing_secrets TEXT NOT NULL, token_hashes TEXT NOT NULL,
    limits TEXT NOT NULL DEFAULT '{}', defaults TEXT NOT NULL DEFAULT '{}'
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tenant_tokens (
    token_hash TEXT PRIMARY KEY, tenant TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ordering_blocks (
    tenant TEXT NOT NULL, ordering_key TEXT NOT NULL, delivery_id TEXT NOT NULL,
    PRIMARY KEY (tenant, ordering_key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters (
    tenant TEXT NOT NULL, dead_ms INTEGER NOT NULL, firing_id TEXT NOT NULL,
    schedule_key TEXT NOT NULL, schedule_id TEXT NOT NULL, delivery_id TEXT NOT NULL,
    shard INTEGER NOT NULL, seq INTEGER NOT NULL, occurrence_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL, last_status INTEGER NOT NULL, last_error TEXT NOT NULL,
    redriven_ms INTEGER, payload BLOB,
    PRIMARY KEY (tenant, dead_ms, firing_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trigger_requests (
    tenant TEXT NOT NULL, key TEXT NOT NULL, request_id TEXT NOT NULL,
    shard INTEGER NOT NULL, fire_at_ms INTEGER NOT NULL, firing_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL, version INTEGER NOT NULL, created_ms INTEGER NOT NULL,
    written INTEGER NOT NULL,
    PRIMARY KEY (tenant, key, request_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shard_cursors (
    shard INTEGER PRIMARY KEY, position_ms INTEGER NOT NULL, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS executions (
    tenant TEXT NOT NULL, schedule_key TEXT NOT NULL, started_ms INTEGER NOT NULL,
    firing_id TEXT NOT NULL, delivery_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    occurrence_ms INTEGER NOT NULL, due_ms INTEGER NOT NULL, duration_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL, status_code INTEGER NOT NULL, error TEXT NOT NULL,
    next_attempt_ms INTEGER, response_body BLOB, response_headers TEXT,
    PRIMARY KEY (tenant, schedule_key, started_ms, firing_id)) WITHOUT ROWID;
"""


class SqliteStore:
    """See `clockwork_svc.abc.Store` for the contract."""

    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._executor = executor
        self._layout: ClusterLayout | None = None

    @classmethod
    async def open(cls, path: Path, default_layout: ClusterLayout) -> Self:
        """Open (creating if needed) the database; the layout is fixed at creation."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        loop = asyncio.get_running_loop()
        conn = await loop.run_in_executor(executor, _connect, path, default_layout)
        return cls(conn, executor)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def close(self) -> None:
        await self._run(self._conn.close)
        self._executor.shutdown(wait=True)

    async def server_time_ms(self) -> int:
        return SystemClock().now_ms()  # embedded: the store's clock is this host's

    def use_write_timestamps(self, timestamps: Callable[[], int]) -> None:
        """Writes are ordered by commit on the one connection, not by timestamp."""

    async def layout(self) -> ClusterLayout:
        if self._layout is not None:
            return self._layout
        return await self._run(self._layout_sync)

    # --- schedules -------------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> Schedule | None:
        return await self._run(self._insert_schedule, schedule)

    async def insert_schedules(
        self, schedules: Sequence[Schedule]
    ) -> list[Schedule | StoreUnavailable | None]:
        # One transaction per schedule on the one file: a failure fails the call.
        return await self._run(lambda: [self._insert_schedule(s) for s in schedules])

    def _insert_schedule(self, s: Schedule) -> Schedule | None:
        with self._conn:
            cur = self._conn.execute(
                f"INSERT INTO schedules ({SCHEDULES.names}) "
                f"VALUES ({markers(len(SCHEDULES.columns))}) ON CONFLICT (tenant, key) DO NOTHING",
                _values(SCHEDULES, s),
            )
        if cur.rowcount == 1:
            return None
        existing = self._get_schedule(s.tenant, s.key)
        assert existing is not None
        return existing

    async def get_schedule(self, tenant: str, key: str) -> Schedule | None:
        return await self._run(self._get_schedule, tenant, key)

    def _get_schedule(self, tenant: str, key: str) -> Schedule | None:
        row = _fetchone(
            self._conn,
            f"SELECT {SCHEDULES.selected} FROM schedules WHERE tenant = ? AND key = ?",
            (tenant, key),
        )
        return _record(SCHEDULES, row) if row else None

    async def list_schedules(
        self, tenant: str, after_key: str | None, limit: int
    ) -> list[Schedule]:
        rows = await self._run(
            _fetchall,
            self._conn,
            f"SELECT {SCHEDULES.selected} FROM schedules WHERE tenant = ? AND key > ? "
            "ORDER BY key LIMIT ?",
            (tenant, after_key or "", limit),
        )
        return [_record(SCHEDULES, r) for r in rows]

    async def search_schedules(
        self, tenant: str, query: ScheduleQuery, after_key: str | None, limit: int, budget: int
    ) -> SearchPage:
        return await self._run(self._search_schedules, tenant, query, after_key, limit, budget)

    def _search_schedules(
        self, tenant: str, query: ScheduleQuery, after_key: str | None, limit: int, budget: int
    ) -> SearchPage:
        equalities = query.selector.equalities() if query.selector else []
        if equalities:
            terms = labels_codec.encode(tuple(equalities))
            return self._search_by_labels(tenant, query, terms, after_key, limit, budget)
        found: list[Schedule] = []
        start, after = query.start(after_key), after_key or ""
        scanned = 0
        while scanned < budget:
            batch = min(budget - scanned, 500)
            rows = _fetchall(
                self._conn,
                f"SELECT {SCHEDULES.selected} FROM schedules WHERE tenant = ? AND key >= ? "
                "AND key > ? AND key < ? ORDER BY key LIMIT ?",
                (tenant, start, after, query.key_end, batch),
            )
            for row in rows:
                schedule = _record(SCHEDULES, row)
                after = schedule.key
                if query.matches(schedule):
                    found.append(schedule)
                    if len(found) == limit:
                        return SearchPage(tuple(found), after)
            scanned += len(rows)
            if len(rows) < batch:
                return SearchPage(tuple(found), None)
        return SearchPage(tuple(found), after)

    def _search_by_labels(
        self,
        tenant: str,
        query: ScheduleQuery,
        terms: list[str],
        after_key: str | None,
        limit: int,
        budget: int,
    ) -> SearchPage:
        """A selector's `key=value` terms are checked by SQLite itself, over a window of
        LABEL_SCAN_FACTOR times the budget's rows (the rest of the query in Python, on
        the rows that have the terms); the next page starts after the window."""
        start, after = query.start(after_key), after_key or ""
        in_range = "tenant = ? AND key >= ? AND key > ? AND key < ?"
        bounds = (tenant, start, after, query.key_end)
        last = self._conn.execute(
            f"SELECT key FROM schedules WHERE {in_range} ORDER BY key LIMIT 1 OFFSET ?",
            (*bounds, budget * LABEL_SCAN_FACTOR - 1),
        ).fetchone()
        window_end: str | None = None if last is None else last[0]
        has = " AND EXISTS (SELECT 1 FROM json_each(schedules.labels) WHERE value = ?)"
        found: list[Schedule] = []
        with contextlib.closing(
            self._conn.execute(
                f"SELECT {SCHEDULES.selected} FROM schedules WHERE {in_range} AND key <= ?"
                f"{has * len(terms)} ORDER BY key",
                (*bounds, query.key_end if window_end is None else window_end, *terms),
            )
        ) as cursor:
            for row in cursor:
                schedule = _record(SCHEDULES, row)
                if query.matches(schedule):
                    found.append(schedule)
                    if len(found) == limit:
                        return SearchPage(tuple(found), schedule.key)
        return SearchPage(tuple(found), window_end)

    async def set_schedule_labels(self, tenant: str, key: str, labels: Labels) -> bool:
        return (
            await self._run(
                _execute_count,
                self._conn,
                "UPDATE schedules SET labels = ? WHERE tenant = ? AND key = ?",
                (json.dumps(labels_codec.encode(labels)), tenant, key),
            )
            == 1
        )

    async def replace_schedule(self, schedule: Schedule, expected_version: int) -> bool:
        changed = SCHEDULES.pick(SCHEDULES.encode(schedule), SCHEDULE_CHANGE + SCHEDULES.key)
        return (
            await self._run(
                _execute_count,
                self._conn,
                f"UPDATE schedules SET {assignments(SCHEDULE_CHANGE)} "
                "WHERE tenant = ? AND key = ? AND version = ?",
                (*changed, expected_version),
            )
            == 1
        )

    async def record_firing(self, record: FiringRecord) -> None:
        e = record.execution
        writes = [_execution(e), _progress(e.tenant, e.schedule_key, record.progress)]
        if record.missed is not None:
            writes.append(_execution(record.missed))
        if record.completes_version is not None:
            writes.append(
                _completion(e.tenant, e.schedule_key, record.completes_version, record.completed_ms)
            )
        if record.dead_letter is not None:
            writes.append(_dead_letter(record.dead_letter))
        if record.ordering_block is not None:
            writes.append(_ordering_block(e.tenant, record.ordering_key, record.ordering_block))
        await self._run(_execute_all, self._conn, writes)

    # --- firings ---------------------------------------------------------------------

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        if firings:
            await self._run(self._put_firings, list(firings))

    def _put_firings(self, firings: list[Firing]) -> None:
        layout = self._layout_sync()
        with self._conn:
            # No `done` column: a re-put must never clear it.
            self._conn.executemany(
                f"INSERT INTO firings (bucket, {FIRINGS.names}) "
                f"VALUES ({markers(len(FIRINGS.columns) + 1)}) ON CONFLICT DO NOTHING",
                [(bucket_of(f.fire_at_ms, layout.bucket_ms), *FIRINGS.encode(f)) for f in firings],
            )

    def _layout_sync(self) -> ClusterLayout:
        if self._layout is None:
            row = _fetchone(
                self._conn, "SELECT shard_count, bucket_ms, created_ms FROM cluster_meta", ()
            )
            assert row is not None
            self._layout = ClusterLayout(row["shard_count"], row["bucket_ms"], row["created_ms"])
        return self._layout

    async def get_firing(self, shard: int, fire_at_ms: int, firing_id: str) -> Firing | None:
        row = await self._run(
            _fetchone,
            self._conn,
            f"SELECT {FIRINGS.selected} FROM firings WHERE shard = ? AND "
            "fire_at_ms = ? AND firing_id = ?",
            (shard, fire_at_ms, firing_id),
        )
        return FIRINGS.decode(row) if row else None

    async def scan_firings(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        rows = await self._run(
            _fetchall,
            self._conn,
            f"SELECT {FIRINGS.selected} FROM firings WHERE shard = ? AND "
            "(fire_at_ms, firing_id) > (?, ?) AND fire_at_ms < ? "
            "ORDER BY fire_at_ms, firing_id LIMIT ?",
            (shard, start[0], start[1], end_ms, limit),
        )
        return [FIRINGS.decode(r) for r in rows]

    async def scan_firing_keys(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[FiringKey]:
        rows = await self._run(
            _fetchall,
            self._conn,
            "SELECT fire_at_ms, firing_id, done FROM firings WHERE shard = ? AND "
            "(fire_at_ms, firing_id) > (?, ?) AND fire_at_ms < ? "
            "ORDER BY fire_at_ms, firing_id LIMIT ?",
            (shard, start[0], start[1], end_ms, limit),
        )
        return [FiringKey(r[0], r[1], bool(r[2])) for r in rows]

    async def mark_done(self, firing: Firing) -> None:
        await self._run(
            _execute_count,
            self._conn,
            "UPDATE firings SET done = 1 WHERE shard = ? AND fire_at_ms = ? AND firing_id = ?",
            (firing.shard, firing.fire_at_ms, firing.firing_id),
        )

    # --- shard cursors -------------------------------------------------------------------

    async def acquire_shard(self, shard: int, epoch: int) -> ShardCursor | None:
        return await self._run(self._acquire_shard, shard, epoch)

    def _acquire_shard(self, shard: int, epoch: int) -> ShardCursor | None:
        start = self._layout_sync().created_ms
        with self._conn:
            self._conn.execute(
                "INSERT INTO shard_cursors (shard, position_ms, epoch) VALUES (?, ?, ?) "
                "ON CONFLICT (shard) DO UPDATE SET epoch = excluded.epoch "
                "WHERE shard_cursors.epoch <= excluded.epoch",
                (shard, start, epoch),
            )
        cursor = self._load_cursor(shard)
        return cursor if cursor is not None and cursor.epoch == epoch else None

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        return (
            await self._run(
                _execute_count,
                self._conn,
                "UPDATE shard_cursors SET position_ms = max(position_ms, ?) "
                "WHERE shard = ? AND epoch = ?",
                (position_ms, shard, epoch),
            )
            == 1
        )

    async def load_cursor(self, shard: int) -> ShardCursor | None:
        return await self._run(self._load_cursor, shard)

    def _load_cursor(self, shard: int) -> ShardCursor | None:
        row = _fetchone(
            self._conn,
            "SELECT shard, position_ms, epoch FROM shard_cursors WHERE shard = ?",
            (shard,),
        )
        return ShardCursor(row["shard"], row["position_ms"], row["epoch"]) if row else None

    # --- tenants ---------------------------------------------------------------------------

    async def insert_tenant(self, tenant: Tenant) -> Tenant | None:
        inserted = await self._run(
            _execute_count,
            self._conn,
            f"INSERT INTO tenants ({TENANTS.names}) VALUES ({markers(len(TENANTS.columns))}) "
            "ON CONFLICT (name) DO NOTHING",
            _values(TENANTS, tenant),
        )
        return None if inserted == 1 else await self.get_tenant(tenant.name)

    async def get_tenant(self, name: str) -> Tenant | None:
        row = await self._run(
            _fetchone,
            self._conn,
            f"SELECT {TENANTS.selected} FROM tenants WHERE name = ?",
            (name,),
        )
        return _record(TENANTS, row) if row else None

    async def list_tenants(self, after: str | None, limit: int) -> list[Tenant]:
        found = await self._run(
            _fetchall,
            self._conn,
            f"SELECT {TENANTS.selected} FROM tenants WHERE name > ? ORDER BY name LIMIT ?",
            (after or "", limit),
        )
        return [_record(TENANTS, r) for r in found]

    async def replace_tenant(self, tenant: Tenant, expected_version: int) -> bool:
        changed = TENANTS.pick(_values(TENANTS, tenant), TENANTS.others + TENANTS.key)
        return (
            await self._run(
                _execute_count,
                self._conn,
                f"UPDATE tenants SET {assignments(TENANTS.others)} WHERE name = ? AND version = ?",
                (*changed, expected_version),
            )
            == 1
        )

    async def put_token_owner(self, token_hash: str, tenant: str) -> None:
        await self._run(
            _execute_count,
            self._conn,
            "INSERT OR REPLACE INTO tenant_tokens VALUES (?, ?)",
            (token_hash, tenant),
        )

    async def token_owner(self, token_hash: str) -> str | None:
        row = await self._run(
            _fetchone,
            self._conn,
            "SELECT tenant FROM tenant_tokens WHERE token_hash = ?",
            (token_hash,),
        )
        return str(row["tenant"]) if row else None

    # --- ordering keys ------------------------------------------------------------------------

    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str:
        row = await self._run(
            _fetchone,
            self._conn,
            "SELECT delivery_id FROM ordering_blocks WHERE tenant = ? AND ordering_key = ?",
            (tenant, ordering_key),
        )
        return str(row["delivery_id"]) if row else ""

    async def set_ordering_block(self, tenant: str, ordering_key: str, delivery_id: str) -> None:
        await self._run(
            _execute_count, self._conn, *_ordering_block(tenant, ordering_key, delivery_id)
        )

    # --- dead letters ------------------------------------------------------------------------

    async def list_dead_letters(
        self,
        tenant: str,
        since_ms: int,
        until_ms: int,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[DeadLetter]:
        start = after or (since_ms - 1, "")
        found = await self._run(
            _fetchall,
            self._conn,
            f"SELECT {DEAD_LETTERS.selected} FROM dead_letters WHERE tenant = ? "
            "AND dead_ms >= ? AND dead_ms < ? AND (dead_ms, firing_id) > (?, ?) "
            "ORDER BY dead_ms, firing_id LIMIT ?",
            (tenant, since_ms, until_ms, start[0], start[1], limit),
        )
        return [DEAD_LETTERS.decode(r) for r in found]

    async def mark_redriven(self, letter: DeadLetter, redriven_ms: int) -> None:
        await self._run(
            _execute_count,
            self._conn,
            "UPDATE dead_letters SET redriven_ms = ? WHERE tenant = ? AND dead_ms = ? "
            "AND firing_id = ?",
            (redriven_ms, letter.tenant, letter.dead_ms, letter.firing_id),
        )

    # --- trigger requests ------------------------------------------------------------------

    async def claim_trigger(self, request: TriggerRequest) -> TriggerRequest:
        return await self._run(self._claim_trigger, request)

    def _claim_trigger(self, request: TriggerRequest) -> TriggerRequest:
        with self._conn:
            row = _fetchone(
                self._conn,
                f"SELECT {TRIGGER_REQUESTS.selected} FROM trigger_requests "
                "WHERE tenant = ? AND key = ? AND request_id = ? AND created_ms > ?",
                (
                    request.tenant,
                    request.key,
                    request.request_id,
                    request.created_ms - TRIGGER_REQUEST_TTL_MS,
                ),
            )
            if row is not None:
                return TRIGGER_REQUESTS.decode(row)
            # An expired claim of the same id is replaced; others are dropped as they age.
            self._conn.execute(
                "DELETE FROM trigger_requests WHERE tenant = ? AND key = ? AND created_ms <= ?",
                (request.tenant, request.key, request.created_ms - TRIGGER_REQUEST_TTL_MS),
            )
            self._conn.execute(
                f"INSERT INTO trigger_requests ({TRIGGER_REQUESTS.names}) "
                f"VALUES ({markers(len(TRIGGER_REQUESTS.columns))})",
                TRIGGER_REQUESTS.encode(request),
            )
        return request

    async def confirm_trigger(self, request: TriggerRequest) -> None:
        await self._run(
            _execute_count,
            self._conn,
            "UPDATE trigger_requests SET written = 1 WHERE tenant = ? AND key = ? "
            "AND request_id = ?",
            (request.tenant, request.key, request.request_id),
        )

    # --- executions ----------------------------------------------------------------------

    async def list_executions(
        self, tenant: str, key: str, before: tuple[int, str] | None, limit: int
    ) -> list[Execution]:
        bound = before or (2**62, "")
        rows = await self._run(
            _fetchall,
            self._conn,
            f"SELECT {EXECUTIONS.selected} FROM executions WHERE tenant = ? AND schedule_key = ? "
            "AND (started_ms, firing_id) < (?, ?) ORDER BY started_ms DESC, firing_id DESC LIMIT ?",
            (tenant, key, bound[0], bound[1], limit),
        )
        return [EXECUTIONS.decode(r) for r in rows]


def _connect(path: Path, default_layout: ClusterLayout) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.executescript(_SCHEMA)
    _add_missing_columns(conn)
    conn.isolation_level = "DEFERRED"
    with conn:
        conn.execute(
            "INSERT OR IGNORE INTO cluster_meta VALUES (1, ?, ?, ?)",
            (default_layout.shard_count, default_layout.bucket_ms, default_layout.created_ms),
        )
    return conn


# Columns added after a data dir may have been created: (table, column, definition).
_ADDED_COLUMNS = (
    ("firings", "redrive", "INTEGER NOT NULL DEFAULT 0"),
    ("firings", "ordering_key", "TEXT NOT NULL DEFAULT ''"),
    ("firings", "payload", "BLOB"),
    ("firings", "overlap", "TEXT NOT NULL DEFAULT 'allow_all'"),
    ("dead_letters", "payload", "BLOB"),
    ("schedules", "note", "TEXT NOT NULL DEFAULT ''"),
    ("schedules", "labels", "TEXT NOT NULL DEFAULT '[]'"),
    ("schedules", "failures_in_row", "INTEGER NOT NULL DEFAULT 0"),
    ("schedules", "trace_parent", "TEXT"),
    ("executions", "response_body", "BLOB"),
    ("executions", "response_headers", "TEXT"),
    ("tenants", "limits", "TEXT NOT NULL DEFAULT '{}'"),
    ("tenants", "defaults", "TEXT NOT NULL DEFAULT '{}'"),
)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """The `_ADDED_COLUMNS` an older data dir lacks (CREATE TABLE IF NOT EXISTS does not
    change an existing table)."""
    present: dict[str, set[str]] = {}
    for table, column, definition in _ADDED_COLUMNS:
        if table not in present:
            present[table] = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present[table]:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _fetchone(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    return conn.execute(sql, params).fetchone()


def _fetchall(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def _execute_count(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> int:
    with conn:
        return conn.execute(sql, params).rowcount


Write = tuple[str, tuple[Any, ...]]
"""A statement and its parameters."""


def _execute_all(conn: sqlite3.Connection, writes: Sequence[Write]) -> None:
    """In one transaction."""
    with conn:
        for sql, params in writes:
            conn.execute(sql, params)


def _progress(tenant: str, key: str, progress: Progress) -> Write:
    return (
        f"UPDATE schedules SET {assignments(PROGRESS)} WHERE tenant = ? AND key = ?",
        (*progress_values(progress), tenant, key),
    )


def _completion(tenant: str, key: str, version: int, at_ms: int) -> Write:
    # One writer at a time: a conditional update is as cheap as any. A version already
    # completed is completed again: a repeated record rewrites the progress before it.
    return (
        "UPDATE schedules SET state = ?, next_fire_ms = NULL, "
        "updated_ms = MAX(updated_ms, ?) WHERE tenant = ? AND key = ? AND version = ? "
        "AND state IN (?, ?)",
        (
            ScheduleState.COMPLETED.value,
            at_ms,
            tenant,
            key,
            version,
            ScheduleState.ACTIVE.value,
            ScheduleState.COMPLETED.value,
        ),
    )


def _ordering_block(tenant: str, ordering_key: str, delivery_id: str) -> Write:
    return (
        "INSERT OR REPLACE INTO ordering_blocks VALUES (?, ?, ?)",
        (tenant, ordering_key, delivery_id),
    )


def _dead_letter(letter: DeadLetter) -> Write:
    # No redriven_ms: recording a letter again never clears a redrive mark.
    return (
        f"INSERT INTO dead_letters ({DEAD_LETTERS.names}) "
        f"VALUES ({markers(len(DEAD_LETTERS.columns))}) ON CONFLICT DO UPDATE SET "
        "last_status = excluded.last_status, last_error = excluded.last_error",
        DEAD_LETTERS.encode(letter),
    )


def _execution(execution: Execution) -> Write:
    return (
        f"INSERT OR REPLACE INTO executions ({EXECUTIONS.names}) "
        f"VALUES ({markers(len(EXECUTIONS.columns))})",
        EXECUTIONS.encode(execution),
    )


def _values(table: Table[R], record: R) -> tuple[Any, ...]:
    """`table.encode`, with its list columns as JSON text."""
    values = table.encode(record)
    if not table.list_columns:
        return values
    lists = table.list_columns
    return tuple(
        json.dumps(v) if c in lists else v for c, v in zip(table.columns, values, strict=True)
    )


def _record(table: Table[R], row: sqlite3.Row) -> R:
    """`table.decode`, reading its list columns from JSON text."""
    if not table.list_columns:
        return table.decode(row)
    lists = table.list_columns
    names = table.columns + table.read_only
    return table.decode({c: json.loads(row[c]) if c in lists else row[c] for c in names})
