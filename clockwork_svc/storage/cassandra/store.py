"""The Cassandra store: `clockwork_svc.abc.Store` on the tables of `schema.py`.

Every request goes through `bridge` (asyncio over `execute_async`, one page at a
time). Statements are prepared once in `open()`. Plain upserts are marked idempotent
so the driver may retry or speculate them; compare-and-set writes (schedule creation
and version changes, shard epochs and cursors) are not.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cassandra import InvalidRequest
from cassandra.query import BatchStatement, BatchType

from clockwork_svc.domain.codec import spec_to_json
from clockwork_svc.domain.identity import bucket_of
from clockwork_svc.domain.model import (
    ClusterLayout,
    DeadLetter,
    Execution,
    Firing,
    Progress,
    Schedule,
    ShardCursor,
)
from clockwork_svc.domain.tenant import Tenant
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, connecting, rows, schema
from clockwork_svc.storage.cassandra.connecting import PROFILE_LWT, PROFILE_SERIAL_READ
from clockwork_svc.storage.cassandra.read_batcher import ScheduleReads
from clockwork_svc.storage.cassandra.write_batcher import DEFAULT_MAX_STATEMENTS, WriteBatcher

T = TypeVar("T")

# Requests one store call keeps in flight at most (the driver multiplexes them over
# its connections; a bound keeps a large put from queueing thousands at once).
_MAX_IN_FLIGHT = 128
# Buckets a scan queries at once: it starts with one (the usual case: the due window
# is inside one bucket) and doubles, so a long empty range costs few round trips.
_MAX_SCAN_WINDOW = 32
_PAGE_SIZE = 5000
# Rows per UNLOGGED batch of firings (one partition): ~5 KiB, Cassandra's default
# batch_size_warn_threshold.
_BATCH_ROWS = 25
_DEFAULT_RETENTION_S = 7 * 86_400
_DEAD_LETTER_RETENTION_MS = 30 * 86_400_000
# Cassandra's longest TTL; and, unless storage_compatibility_mode is NONE, no cell may
# expire after 2038-01-19 (a day of margin). A firing whose TTL would pass either
# limit is written without TTL: kept forever is better than gone before it is due.
_MAX_TTL_S = 20 * 365 * 86_400
_LEGACY_EXPIRY_LIMIT_S = 2**31 - 1 - 86_400


def firing_ttl_s(fire_at_ms: int, retention_s: int, now_s: float) -> int:
    """Seconds a firing row lives: until it is due, plus the retention period.

    0 means "no TTL" in CQL (see the limits above).
    """
    ttl = retention_s + max(0, math.ceil(fire_at_ms / 1000 - now_s))
    if ttl > _MAX_TTL_S or (now_s < _LEGACY_EXPIRY_LIMIT_S < now_s + ttl):
        return 0
    return ttl


@dataclass(frozen=True, slots=True)
class _Statements:
    insert_schedule: Any
    select_schedule: Any
    select_schedules: Any
    upsert_index: Any
    list_index: Any
    replace_schedule: Any
    record_progress: Any
    complete_schedule: Any
    put_firing: Any
    get_firing: Any
    scan_bucket: Any
    mark_done: Any
    insert_cursor: Any
    take_cursor: Any
    advance_cursor: Any
    load_cursor: Any
    record_execution: Any
    list_executions: Any
    list_executions_before: Any
    insert_tenant: Any
    select_tenant: Any
    list_tenants_first: Any
    list_tenants_after: Any
    replace_tenant: Any
    put_token_owner: Any
    token_owner: Any
    server_time: Any
    record_dead_letter: Any
    get_ordering_block: Any
    set_ordering_block: Any
    list_dead_letters: Any
    mark_redriven: Any


def _cql(ks: str) -> dict[str, tuple[str, bool]]:
    """CQL of every statement, and whether it is an idempotent plain upsert/read."""
    sched = rows.SCHEDULE_COLUMNS
    firing = rows.FIRING_COLUMNS
    execution = rows.EXECUTION_COLUMNS
    tenant = rows.TENANT_COLUMNS
    return {
        # `IF id = null` rather than `INSERT ... IF NOT EXISTS`: a partial row left by
        # record_progress (id null) must not count as an existing schedule.
        "insert_schedule": (
            f"UPDATE {ks}.schedules SET id = ?, spec = ?, payload = ?, state = ?, version = ?, "
            "created_ms = ?, updated_ms = ?, shard = ?, next_fire_ms = ?, last_fire_ms = ?, "
            "last_outcome = ?, fired_count = ?, completed_version = null "
            "WHERE tenant = ? AND key = ? IF id = null",
            False,
        ),
        "select_schedule": (
            f"SELECT {sched} FROM {ks}.schedules WHERE tenant = ? AND key = ?",
            True,
        ),
        "select_schedules": (
            f"SELECT {sched} FROM {ks}.schedules WHERE tenant = ? AND key IN ?",
            True,
        ),
        "upsert_index": (
            f"INSERT INTO {ks}.schedule_index (tenant, part, key) VALUES (?, ?, ?)",
            True,
        ),
        "list_index": (
            f"SELECT key FROM {ks}.schedule_index WHERE tenant = ? AND part = ? AND key > ? "
            "LIMIT ?",
            True,
        ),
        "replace_schedule": (
            f"UPDATE {ks}.schedules SET spec = ?, payload = ?, state = ?, version = ?, "
            "updated_ms = ?, next_fire_ms = ? WHERE tenant = ? AND key = ? IF version = ?",
            False,
        ),
        "record_progress": (
            f"UPDATE {ks}.schedules SET next_fire_ms = ?, last_fire_ms = ?, last_outcome = ?, "
            "fired_count = ? WHERE tenant = ? AND key = ?",
            True,
        ),
        "complete_schedule": (
            f"UPDATE {ks}.schedules SET completed_version = ?, completed_ms = ? "
            "WHERE tenant = ? AND key = ?",
            True,
        ),
        # No `done` column: a re-put must never clear it.
        "put_firing": (
            f"INSERT INTO {ks}.firings (shard, bucket, fire_at_ms, firing_id, tenant, "
            "schedule_key, schedule_id, version, seq, occurrence_ms, attempt, delivery_id, "
            "redrive, ordering_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "USING TTL ?",
            True,
        ),
        "get_firing": (
            f"SELECT {firing} FROM {ks}.firings WHERE shard = ? AND bucket = ? "
            "AND fire_at_ms = ? AND firing_id = ?",
            True,
        ),
        "scan_bucket": (
            f"SELECT {firing} FROM {ks}.firings WHERE shard = ? AND bucket = ? "
            "AND (fire_at_ms, firing_id) > (?, ?) AND fire_at_ms < ? LIMIT ?",
            True,
        ),
        "mark_done": (
            f"UPDATE {ks}.firings USING TTL ? SET done = true WHERE shard = ? AND bucket = ? "
            "AND fire_at_ms = ? AND firing_id = ?",
            True,
        ),
        "insert_cursor": (
            f"INSERT INTO {ks}.shard_cursors (shard, position_ms, epoch) VALUES (?, ?, ?) "
            "IF NOT EXISTS",
            False,
        ),
        # Conditioned on the position too, so the cursor returned is exactly the one
        # taken over (an advance by the previous owner in between makes it retry).
        "take_cursor": (
            f"UPDATE {ks}.shard_cursors SET epoch = ? WHERE shard = ? "
            "IF epoch = ? AND position_ms = ?",
            False,
        ),
        "advance_cursor": (
            f"UPDATE {ks}.shard_cursors SET position_ms = ? WHERE shard = ? "
            "IF epoch = ? AND position_ms < ?",
            False,
        ),
        "load_cursor": (
            f"SELECT shard, position_ms, epoch FROM {ks}.shard_cursors WHERE shard = ?",
            True,
        ),
        "record_execution": (
            f"INSERT INTO {ks}.executions ({execution}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            True,
        ),
        "list_executions": (
            f"SELECT {execution} FROM {ks}.executions WHERE tenant = ? AND schedule_key = ? "
            "LIMIT ?",
            True,
        ),
        "list_executions_before": (
            f"SELECT {execution} FROM {ks}.executions WHERE tenant = ? AND schedule_key = ? "
            "AND (started_ms, firing_id) < (?, ?) LIMIT ?",
            True,
        ),
        "insert_tenant": (
            f"INSERT INTO {ks}.tenants ({tenant}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
            False,
        ),
        "select_tenant": (f"SELECT {tenant} FROM {ks}.tenants WHERE name = ?", True),
        # Tenants are few; they are listed in token order (stable across pages).
        "list_tenants_first": (f"SELECT {tenant} FROM {ks}.tenants LIMIT ?", True),
        "list_tenants_after": (
            f"SELECT {tenant} FROM {ks}.tenants WHERE token(name) > token(?) LIMIT ?",
            True,
        ),
        "replace_tenant": (
            f"UPDATE {ks}.tenants SET created_ms = ?, updated_ms = ?, version = ?, "
            "signing_secrets = ?, token_hashes = ?, limits = ?, defaults = ? WHERE name = ? "
            "IF version = ?",
            False,
        ),
        "put_token_owner": (
            f"INSERT INTO {ks}.tenant_tokens (token_hash, tenant) VALUES (?, ?)",
            True,
        ),
        "token_owner": (f"SELECT tenant FROM {ks}.tenant_tokens WHERE token_hash = ?", True),
        # The coordinator's clock (now() is a time-based UUID made by the coordinator).
        "server_time": ("SELECT toUnixTimestamp(now()) AS now_ms FROM system.local", True),
        "get_ordering_block": (
            f"SELECT delivery_id FROM {ks}.ordering_blocks WHERE tenant = ? AND ordering_key = ?",
            True,
        ),
        "set_ordering_block": (
            f"INSERT INTO {ks}.ordering_blocks (tenant, ordering_key, delivery_id) "
            "VALUES (?, ?, ?)",
            True,
        ),
        # No redriven_ms: recording a letter again never clears a redrive mark.
        "record_dead_letter": (
            f"INSERT INTO {ks}.dead_letters (day, tenant, schedule_key, schedule_id, "
            "firing_id, delivery_id, shard, seq, occurrence_ms, attempts, dead_ms, "
            "last_status, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            True,
        ),
        "list_dead_letters": (
            f"SELECT {rows.DEAD_LETTER_COLUMNS} FROM {ks}.dead_letters WHERE tenant = ? "
            "AND day = ? AND (dead_ms, firing_id) > (?, ?) AND dead_ms < ? LIMIT ?",
            True,
        ),
        "mark_redriven": (
            f"UPDATE {ks}.dead_letters SET redriven_ms = ? WHERE tenant = ? AND day = ? "
            "AND dead_ms = ? AND firing_id = ?",
            True,
        ),
    }


async def _prepare_all(session: Any, keyspace: str) -> _Statements:
    cql = _cql(keyspace)

    def prepare(text: str, idempotent: bool) -> Any:
        statement = session.prepare(text)  # blocking: runs in a worker thread
        statement.is_idempotent = idempotent
        return statement

    try:
        prepared = await asyncio.gather(
            *(asyncio.to_thread(prepare, text, idem) for text, idem in cql.values())
        )
    except Exception as exc:
        mapped = bridge.translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc
    return _Statements(**dict(zip(cql, prepared, strict=True)))


class CassandraStore:
    """See `clockwork_svc.abc.Store` for the contract."""

    def __init__(
        self,
        cluster: Any,
        session: Any,
        statements: _Statements,
        layout: ClusterLayout,
        firing_retention_s: int,
        write_batch: int = DEFAULT_MAX_STATEMENTS,
        batch_linger_s: float = 0.0,
        read_linger_s: float = 0.0,
    ) -> None:
        self._cluster = cluster
        self._session = session
        # The per-firing upserts (execution, runtime columns, ordering block, done).
        self._writes = WriteBatcher(session, max_statements=write_batch, linger_s=batch_linger_s)
        # Schedule reads issued together (one per dispatched firing) go as one request.
        self._schedule_reads = ScheduleReads(
            session, statements.select_schedules, linger_s=read_linger_s
        )
        self._st = statements
        self._layout = layout
        self._retention_s = firing_retention_s
        self._closed = False

    @classmethod
    async def open(
        cls,
        contact_points: list[str],
        keyspace: str,
        *,
        local_dc: str | None = None,
        username: str | None = None,
        password: str | None = None,
        connect_timeout_s: float = 60.0,
        write_batch: int = DEFAULT_MAX_STATEMENTS,
        batch_linger_s: float = 0.0,
        read_linger_s: float = 0.0,
    ) -> CassandraStore:
        """Connect (retrying an unreachable cluster until `connect_timeout_s`), check the
        keyspace's schema and layout, and prepare every statement.

        `batch_linger_s`: how long the per-firing upserts are gathered into one batch
        (they follow a delivery: no client waits on them); `read_linger_s`: the same for
        schedule reads (a worker's read ahead of the due time; an api's answer a client
        waits for, so 0 there)."""
        schema.check_keyspace(keyspace)
        cluster, session = await connecting.connect(
            contact_points,
            local_dc=local_dc,
            username=username,
            password=password,
            timeout_s=connect_timeout_s,
        )
        try:
            layout, retention_s = await _check_schema(session, keyspace, contact_points)
            statements = await _prepare_all(session, keyspace)
        except BaseException:
            await connecting.shutdown(cluster)
            raise
        return cls(
            cluster,
            session,
            statements,
            layout,
            retention_s,
            write_batch,
            batch_linger_s,
            read_linger_s,
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._writes.drain()
            await connecting.shutdown(self._cluster)

    async def layout(self) -> ClusterLayout:
        return self._layout

    async def server_time_ms(self) -> int:
        row = await bridge.first(self._session, self._st.server_time)
        if row is None:  # system.local always has its one row
            raise StoreUnavailable("system.local returned no row")
        return int(row["now_ms"])

    def use_write_timestamps(self, timestamps: Callable[[], int]) -> None:
        """Take every write's timestamp (microseconds) from `timestamps` instead of
        the driver's own generator, which reads this host's wall clock."""
        self._cluster.timestamp_generator = timestamps

    # --- schedules -------------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> Schedule | None:
        s = schedule
        # The index entry goes first: a crash in between leaves an index entry without
        # a schedule (skipped by list_schedules), never a schedule that list misses.
        await self._run(self._st.upsert_index, (s.tenant, rows.index_part(s.key), s.key))
        page = await self._run(
            self._st.insert_schedule,
            (
                s.id,
                spec_to_json(s.spec),
                s.spec.payload,
                s.state.value,
                s.version,
                s.created_ms,
                s.updated_ms,
                s.shard,
                s.next_fire_ms,
                s.last_fire_ms,
                s.last_outcome.value if s.last_outcome else None,
                s.fired_count,
                s.tenant,
                s.key,
            ),
            profile=PROFILE_LWT,
        )
        if page.rows[0]["[applied]"]:
            return None
        # The failed compare-and-set only returns `id`: read the winner linearizably.
        row = await bridge.first(
            self._session, self._st.select_schedule, (s.tenant, s.key), profile=PROFILE_SERIAL_READ
        )
        if not rows.is_schedule(row):
            raise StoreUnavailable(f"schedule {s.tenant}/{s.key} changed during insert; retry")
        return rows.schedule(row)

    async def get_schedule(self, tenant: str, key: str) -> Schedule | None:
        row = await self._schedule_reads.get(tenant, key)
        return rows.schedule(row) if rows.is_schedule(row) else None

    async def list_schedules(
        self, tenant: str, after_key: str | None, limit: int
    ) -> list[Schedule]:
        found: list[Schedule] = []
        after = after_key or ""
        while len(found) < limit:
            need = limit - len(found)
            parts = await bridge.gather_bounded(
                (
                    bridge.fetch(
                        self._session,
                        self._st.list_index,
                        (tenant, part, after, need),
                        max_rows=need,
                    )
                    for part in range(rows.INDEX_PARTS)
                ),
                rows.INDEX_PARTS,
            )
            keys = list(
                itertools.islice(heapq.merge(*([r["key"] for r in part] for part in parts)), need)
            )
            if not keys:
                break
            fetched = await bridge.gather_bounded(
                (bridge.first(self._session, self._st.select_schedule, (tenant, k)) for k in keys),
                _MAX_IN_FLIGHT,
            )
            # An index entry without its schedule (a crash mid-insert) is skipped.
            found += [rows.schedule(r) for r in fetched if rows.is_schedule(r)]
            if len(keys) < need:
                break
            after = keys[-1]
        return found

    async def replace_schedule(self, schedule: Schedule, expected_version: int) -> bool:
        s = schedule
        page = await self._run(
            self._st.replace_schedule,
            (
                spec_to_json(s.spec),
                s.spec.payload,
                s.state.value,
                s.version,
                s.updated_ms,
                s.next_fire_ms,
                s.tenant,
                s.key,
                expected_version,
            ),
            profile=PROFILE_LWT,
        )
        return bool(page.rows[0]["[applied]"])

    async def record_progress(self, tenant: str, key: str, progress: Progress) -> None:
        p = progress
        await self._writes.write(
            self._st.record_progress,
            (
                p.next_fire_ms,
                p.last_fire_ms,
                p.last_outcome.value if p.last_outcome else None,
                p.fired_count,
                tenant,
                key,
            ),
        )

    async def complete_schedule(self, tenant: str, key: str, version: int, at_ms: int) -> None:
        await self._writes.write(self._st.complete_schedule, (version, at_ms, tenant, key))

    # --- firings ---------------------------------------------------------------------

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        if not firings:
            return
        bucket_ms = self._layout.bucket_ms
        now_s = time.time()
        partitions: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        for f in firings:
            bucket = bucket_of(f.fire_at_ms, bucket_ms)
            partitions.setdefault((f.shard, bucket), []).append(
                (
                    f.shard,
                    bucket,
                    f.fire_at_ms,
                    f.firing_id,
                    f.tenant,
                    f.schedule_key,
                    f.schedule_id,
                    f.version,
                    f.seq,
                    f.occurrence_ms,
                    f.attempt,
                    f.delivery_id,
                    f.redrive,
                    f.ordering_key,
                    firing_ttl_s(f.fire_at_ms, self._retention_s, now_s),
                )
            )
        # One UNLOGGED batch per partition (a single mutation on one replica set, not a
        # multi-partition batch): measured 3-10x the rows/s of one INSERT per row.
        requests = [
            self._put_chunk(chunk)
            for values in partitions.values()
            for chunk in _chunks(values, _BATCH_ROWS)
        ]
        await bridge.gather_bounded(requests, _MAX_IN_FLIGHT)

    async def _put_chunk(self, chunk: list[tuple[Any, ...]]) -> None:
        if len(chunk) == 1:
            await self._run(self._st.put_firing, chunk[0])
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True
        for values in chunk:
            batch.add(self._st.put_firing, values)
        await bridge.execute(self._session, batch)

    async def get_firing(self, shard: int, fire_at_ms: int, firing_id: str) -> Firing | None:
        row = await bridge.first(
            self._session,
            self._st.get_firing,
            (shard, bucket_of(fire_at_ms, self._layout.bucket_ms), fire_at_ms, firing_id),
        )
        return rows.firing(row) if row is not None and rows.is_firing(row) else None

    async def scan_firings(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        if limit <= 0 or end_ms <= start[0]:
            return []
        bucket_ms = self._layout.bucket_ms
        bucket, last = bucket_of(start[0], bucket_ms), bucket_of(end_ms - 1, bucket_ms)
        found: list[Firing] = []
        window = 1
        while bucket <= last and len(found) < limit:
            buckets = range(bucket, min(bucket + window, last + 1))
            need = limit - len(found)
            pages = await asyncio.gather(
                *(self._scan_bucket(shard, b, start, end_ms, need) for b in buckets)
            )
            got = sum(len(page) for page in pages)
            for page in pages:  # buckets are disjoint and in time order
                found += page[: limit - len(found)]
            bucket = buckets.stop
            window = _next_window(window, got, limit - len(found))
        return found

    async def _scan_bucket(
        self, shard: int, bucket: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        found: list[Firing] = []
        after = start
        while len(found) < limit:
            need = limit - len(found)
            seen = 0
            async for page in bridge.pages(
                self._session,
                self._st.scan_bucket,
                (shard, bucket, after[0], after[1], end_ms, need),
                max_rows=need,
                page_size=_PAGE_SIZE,
            ):
                found += [rows.firing(r) for r in page if rows.is_firing(r)]
                seen += len(page)
                if page:
                    after = (page[-1]["fire_at_ms"], page[-1]["firing_id"])
            if seen < need:
                break
            # Some rows were partial (skipped): continue after the last one seen.
        return found

    async def mark_done(self, firing: Firing) -> None:
        f = firing
        await self._writes.write(
            self._st.mark_done,
            (
                firing_ttl_s(f.fire_at_ms, self._retention_s, time.time()),
                f.shard,
                bucket_of(f.fire_at_ms, self._layout.bucket_ms),
                f.fire_at_ms,
                f.firing_id,
            ),
        )

    # --- shard cursors and fencing -----------------------------------------------------

    async def acquire_shard(self, shard: int, epoch: int) -> ShardCursor | None:
        start = self._layout.created_ms
        while True:
            page = await self._run(
                self._st.insert_cursor, (shard, start, epoch), profile=PROFILE_LWT
            )
            row = page.rows[0]
            if row["[applied]"]:
                return ShardCursor(shard, start, epoch)
            while row.get("epoch") is not None:
                seen_epoch, seen_position = int(row["epoch"]), int(row["position_ms"])
                if seen_epoch > epoch:
                    return None
                if seen_epoch == epoch:
                    return ShardCursor(shard, seen_position, epoch)
                page = await self._run(
                    self._st.take_cursor,
                    (epoch, shard, seen_epoch, seen_position),
                    profile=PROFILE_LWT,
                )
                row = page.rows[0]
                if row["[applied]"]:
                    return ShardCursor(shard, seen_position, epoch)
            # The row vanished (only by hand): start over with the insert.

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        page = await self._run(
            self._st.advance_cursor, (position_ms, shard, epoch, position_ms), profile=PROFILE_LWT
        )
        row = page.rows[0]
        if row["[applied]"]:
            return True
        # Not applied: fenced off (another epoch, or no cursor), or not a move forward.
        return row.get("epoch") == epoch

    async def load_cursor(self, shard: int) -> ShardCursor | None:
        row = await bridge.first(
            self._session, self._st.load_cursor, (shard,), profile=PROFILE_SERIAL_READ
        )
        if row is None or row["epoch"] is None:
            return None
        return ShardCursor(int(row["shard"]), int(row["position_ms"]), int(row["epoch"]))

    # --- executions ----------------------------------------------------------------------

    async def record_execution(self, execution: Execution) -> None:
        e = execution
        await self._writes.write(
            self._st.record_execution,
            (
                e.tenant,
                e.schedule_key,
                e.firing_id,
                e.delivery_id,
                e.attempt,
                e.occurrence_ms,
                e.due_ms,
                e.started_ms,
                e.duration_ms,
                e.outcome.value,
                e.status_code,
                e.error,
                e.next_attempt_ms,
            ),
        )

    async def list_executions(
        self, tenant: str, key: str, before: tuple[int, str] | None, limit: int
    ) -> list[Execution]:
        if limit <= 0:
            return []
        params: tuple[Any, ...]
        if before is None:
            statement, params = self._st.list_executions, (tenant, key, limit)
        else:
            statement = self._st.list_executions_before
            params = (tenant, key, before[0], before[1], limit)
        found = await bridge.fetch(
            self._session, statement, params, max_rows=limit, page_size=_PAGE_SIZE
        )
        return [rows.execution(r) for r in found]

    # --- helpers -------------------------------------------------------------------------

    # --- ordering keys ----------------------------------------------------------------------

    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str:
        row = await bridge.first(self._session, self._st.get_ordering_block, (tenant, ordering_key))
        return str(row["delivery_id"] or "") if row is not None else ""

    async def set_ordering_block(self, tenant: str, ordering_key: str, delivery_id: str) -> None:
        await self._writes.write(self._st.set_ordering_block, (tenant, ordering_key, delivery_id))

    # --- dead letters -------------------------------------------------------------------------

    async def record_dead_letter(self, letter: DeadLetter) -> None:
        d = letter
        await self._run(
            self._st.record_dead_letter,
            (
                d.dead_ms // rows.DAY_MS,
                d.tenant,
                d.schedule_key,
                d.schedule_id,
                d.firing_id,
                d.delivery_id,
                d.shard,
                d.seq,
                d.occurrence_ms,
                d.attempts,
                d.dead_ms,
                d.last_status,
                d.last_error,
            ),
        )

    async def list_dead_letters(
        self,
        tenant: str,
        since_ms: int,
        until_ms: int,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[DeadLetter]:
        start = after or (since_ms - 1, "")
        found: list[DeadLetter] = []
        oldest_day = (int(time.time() * 1000) - _DEAD_LETTER_RETENTION_MS) // rows.DAY_MS
        day = max(start[0] // rows.DAY_MS, oldest_day)
        while len(found) < limit and day <= (until_ms - 1) // rows.DAY_MS:
            page = await bridge.fetch(
                self._session,
                self._st.list_dead_letters,
                (tenant, day, start[0], start[1], until_ms, limit - len(found)),
                max_rows=limit - len(found),
            )
            found += [rows.dead_letter(r) for r in page if r["dead_ms"] >= since_ms]
            day += 1
        return found

    async def mark_redriven(self, letter: DeadLetter, redriven_ms: int) -> None:
        await self._run(
            self._st.mark_redriven,
            (
                redriven_ms,
                letter.tenant,
                letter.dead_ms // rows.DAY_MS,
                letter.dead_ms,
                letter.firing_id,
            ),
        )

    # --- tenants ----------------------------------------------------------------------------

    async def insert_tenant(self, tenant: Tenant) -> Tenant | None:
        page = await self._run(
            self._st.insert_tenant, rows.tenant_params(tenant), profile=PROFILE_LWT
        )
        if page.rows[0]["[applied]"]:
            return None
        row = await bridge.first(
            self._session, self._st.select_tenant, (tenant.name,), profile=PROFILE_SERIAL_READ
        )
        if row is None:
            raise StoreUnavailable(f"tenant {tenant.name} changed during insert; retry")
        return rows.tenant(row)

    async def get_tenant(self, name: str) -> Tenant | None:
        row = await bridge.first(self._session, self._st.select_tenant, (name,))
        return rows.tenant(row) if row is not None else None

    async def list_tenants(self, after: str | None, limit: int) -> list[Tenant]:
        statement: Any = self._st.list_tenants_first
        params: tuple[Any, ...] = (limit,)
        if after is not None:
            statement, params = self._st.list_tenants_after, (after, limit)
        found = await bridge.fetch(self._session, statement, params, max_rows=limit)
        return [rows.tenant(r) for r in found]

    async def replace_tenant(self, tenant: Tenant, expected_version: int) -> bool:
        name, *rest = rows.tenant_params(tenant)
        page = await self._run(
            self._st.replace_tenant, (*rest, name, expected_version), profile=PROFILE_LWT
        )
        return bool(page.rows[0]["[applied]"])

    async def put_token_owner(self, token_hash: str, tenant: str) -> None:
        await self._run(self._st.put_token_owner, (token_hash, tenant))

    async def token_owner(self, token_hash: str) -> str | None:
        row = await bridge.first(self._session, self._st.token_owner, (token_hash,))
        return str(row["tenant"]) if row is not None else None

    async def _run(
        self, statement: Any, params: Sequence[Any], *, profile: Any = connecting.PROFILE_DEFAULT
    ) -> bridge.Page:
        return await bridge.execute(self._session, statement, params, profile=profile)


def _next_window(window: int, got: int, still_needed: int) -> int:
    """Buckets to query next: double while the range is empty; once rows show up, about
    as many buckets as the density seen suggests (so a dense range is not over-read)."""
    grown = min(window * 2, _MAX_SCAN_WINDOW)
    if got == 0 or still_needed <= 0:
        return grown
    return max(1, min(grown, math.ceil(still_needed * window / got)))


def _chunks(values: list[T], size: int) -> list[list[T]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


async def _check_schema(
    session: Any, keyspace: str, contact_points: Sequence[str]
) -> tuple[ClusterLayout, int]:
    """The layout and firing retention, or StoreUnavailable if the schema is not there."""
    where = ", ".join(contact_points)
    try:
        versions = await schema.applied_versions(session, keyspace)
    except InvalidRequest as exc:
        raise StoreUnavailable(
            f"keyspace {keyspace!r} at {where} has no Clockwork schema: "
            "run `clockwork schema migrate` first"
        ) from exc
    if not versions or max(versions) < schema.LATEST_VERSION:
        raise StoreUnavailable(
            f"keyspace {keyspace!r} at {where} is at schema version "
            f"{max(versions, default=0)}, this build needs {schema.LATEST_VERSION}: "
            "run `clockwork schema migrate`"
        )
    layout = await schema.load_layout(session, keyspace)
    if layout is None:
        raise StoreUnavailable(f"keyspace {keyspace!r} at {where} has no cluster layout yet")
    row = await bridge.first(
        session,
        "SELECT default_time_to_live FROM system_schema.tables "
        "WHERE keyspace_name = %s AND table_name = 'firings'",
        (keyspace,),
    )
    retention = int(row["default_time_to_live"]) if row else 0
    return layout, retention or _DEFAULT_RETENTION_S
