"""The Cassandra store: `clockwork_svc.abc.Store` on the tables of `schema.py`.

Every request goes through `bridge` (asyncio over `execute_async`, one page at a
time). Statements are prepared once in `open()`. Plain upserts are marked idempotent
so the driver may retry or speculate them; compare-and-set writes (schedule creation
and version changes, shard epochs and cursors) are not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cassandra import InvalidRequest
from cassandra.query import BatchStatement, BatchType

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
    Schedule,
    ScheduleQuery,
    ScheduleState,
    SearchPage,
    ShardCursor,
    TriggerRequest,
)
from clockwork_svc.domain.tenant import Tenant
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, connecting, node_settings, rows, schema
from clockwork_svc.storage.cassandra.connecting import PROFILE_LWT, PROFILE_SERIAL_READ
from clockwork_svc.storage.cassandra.read_batcher import ScheduleReads
from clockwork_svc.storage.cassandra.write_batcher import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_STATEMENTS,
    Statement,
    WriteBatcher,
    counted_size,
)
from clockwork_svc.storage.columns import (
    DEAD_LETTERS,
    EXECUTIONS,
    FIRINGS,
    PROGRESS,
    SCHEDULE_CHANGE,
    SCHEDULES,
    TENANTS,
    TRIGGER_REQUESTS,
    assignments,
    markers,
    progress_values,
)

if TYPE_CHECKING:
    from clockwork_svc.settings import CassandraTlsSettings

T = TypeVar("T")
R = TypeVar("R")

# Requests one store call keeps in flight at most (the driver multiplexes them over
# its connections; a bound keeps a large put from queueing thousands at once).
_MAX_IN_FLIGHT = 128
# Times a compare-and-set is sent again after an unknown outcome (Paxos contention, or a
# round that timed out), with jittered exponential backoff from _CAS_BACKOFF_S: at most
# about 1.3 s of waiting in all.
_CAS_UNKNOWN_RETRIES = 6
_CAS_BACKOFF_S = 0.02
# Buckets a scan queries at once: it starts with one (the usual case: the due window
# is inside one bucket) and doubles, so a long empty range costs few round trips.
_MAX_SCAN_WINDOW = 32
_PAGE_SIZE = 5000
# Rows per UNLOGGED batch of firings (one partition): ~5 KiB, Cassandra's default
# batch_size_warn_threshold.
_BATCH_ROWS = 25
# Creates per conditional batch (one partition, one Paxos round).
_CAS_BATCH_ROWS = 32
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
class Cql:
    text: str
    # A plain upsert or read, which the driver may retry or speculate.
    idempotent: bool


@dataclass(frozen=True, slots=True)
class Statements(Generic[T]):
    """Every statement of the store: its CQL (`Statements[Cql]`, from `cql()`) or, once
    prepared, the driver's prepared statement."""

    insert_schedule: T
    select_schedule: T
    select_schedules: T
    list_part_keys: T
    replace_schedule: T
    record_progress: T
    record_last_progress: T
    put_firing: T
    get_firing: T
    scan_bucket: T
    scan_bucket_keys: T
    mark_done: T
    insert_cursor: T
    take_cursor: T
    advance_cursor: T
    load_cursor: T
    record_execution: T
    list_executions: T
    list_executions_before: T
    insert_tenant: T
    select_tenant: T
    list_tenants_first: T
    list_tenants_after: T
    replace_tenant: T
    put_token_owner: T
    token_owner: T
    server_time: T
    record_dead_letter: T
    get_ordering_block: T
    set_ordering_block: T
    list_dead_letters: T
    mark_redriven: T
    claim_trigger: T
    confirm_trigger: T
    set_labels: T

    def values(self) -> list[T]:
        """Every statement, in field order (the constructor's positional order)."""
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


_SCHEDULE_KEY = "tenant = ? AND part = ? AND key = ?"
"""A schedule's row (`rows.schedule_key`)."""

# The CQL of every statement; `$ks` stands for the keyspace.
_CQL: Statements[Cql] = Statements(
    # `IF id = null` rather than `INSERT ... IF NOT EXISTS`: a partial row left by
    # record_firing (id null) must not count as an existing schedule.
    insert_schedule=Cql(
        f"UPDATE $ks.schedules_by_part SET {assignments(SCHEDULES.others)}, "
        f"completed_version = null WHERE {_SCHEDULE_KEY} IF id = null",
        False,
    ),
    select_schedule=Cql(
        f"SELECT {rows.SCHEDULE_SELECTED} FROM $ks.schedules_by_part WHERE {_SCHEDULE_KEY}",
        True,
    ),
    # Schedules of one tenant in any of the parts: every (part, key) pair is looked up.
    select_schedules=Cql(
        f"SELECT {rows.SCHEDULE_SELECTED} FROM $ks.schedules_by_part "
        "WHERE tenant = ? AND part IN ? AND key IN ?",
        True,
    ),
    list_part_keys=Cql(
        "SELECT key FROM $ks.schedules_by_part WHERE tenant = ? AND part = ? AND key > ? LIMIT ?",
        True,
    ),
    replace_schedule=Cql(
        f"UPDATE $ks.schedules_by_part SET {assignments(SCHEDULE_CHANGE)} "
        f"WHERE {_SCHEDULE_KEY} IF version = ?",
        False,
    ),
    record_progress=Cql(
        f"UPDATE $ks.schedules_by_part SET {assignments(PROGRESS)} WHERE {_SCHEDULE_KEY}",
        True,
    ),
    # The progress of a last occurrence, with the completion marker of its version.
    record_last_progress=Cql(
        f"UPDATE $ks.schedules_by_part SET {assignments(PROGRESS)}, completed_version = ?, "
        f"completed_ms = ? WHERE {_SCHEDULE_KEY}",
        True,
    ),
    # No `done` column: a re-put must never clear it.
    put_firing=Cql(
        f"INSERT INTO $ks.firings ({rows.FIRING_INSERTED}) "
        f"VALUES ({markers(len(FIRINGS.columns) + 1)}) USING TTL ?",
        True,
    ),
    get_firing=Cql(
        f"SELECT {FIRINGS.selected} FROM $ks.firings WHERE shard = ? AND bucket = ? "
        "AND fire_at_ms = ? AND firing_id = ?",
        True,
    ),
    scan_bucket=Cql(
        f"SELECT {FIRINGS.selected} FROM $ks.firings WHERE shard = ? AND bucket = ? "
        "AND (fire_at_ms, firing_id) > (?, ?) AND fire_at_ms < ? LIMIT ?",
        True,
    ),
    # `tenant` tells a firing from a row that holds only a `done` (rows.is_firing).
    scan_bucket_keys=Cql(
        "SELECT fire_at_ms, firing_id, done, tenant FROM $ks.firings WHERE shard = ? "
        "AND bucket = ? AND (fire_at_ms, firing_id) > (?, ?) AND fire_at_ms < ? LIMIT ?",
        True,
    ),
    mark_done=Cql(
        "UPDATE $ks.firings USING TTL ? SET done = true WHERE shard = ? AND bucket = ? "
        "AND fire_at_ms = ? AND firing_id = ?",
        True,
    ),
    insert_cursor=Cql(
        "INSERT INTO $ks.shard_cursors (shard, position_ms, epoch) VALUES (?, ?, ?) IF NOT EXISTS",
        False,
    ),
    # Conditioned on the position too, so the cursor returned is exactly the one
    # taken over (an advance by the previous owner in between makes it retry).
    take_cursor=Cql(
        "UPDATE $ks.shard_cursors SET epoch = ? WHERE shard = ? IF epoch = ? AND position_ms = ?",
        False,
    ),
    advance_cursor=Cql(
        "UPDATE $ks.shard_cursors SET position_ms = ? WHERE shard = ? "
        "IF epoch = ? AND position_ms < ?",
        False,
    ),
    load_cursor=Cql(
        "SELECT shard, position_ms, epoch FROM $ks.shard_cursors WHERE shard = ?", True
    ),
    record_execution=Cql(
        f"INSERT INTO $ks.executions ({EXECUTIONS.names}) "
        f"VALUES ({markers(len(EXECUTIONS.columns))})",
        True,
    ),
    list_executions=Cql(
        f"SELECT {EXECUTIONS.selected} FROM $ks.executions WHERE tenant = ? AND schedule_key = ? "
        "LIMIT ?",
        True,
    ),
    list_executions_before=Cql(
        f"SELECT {EXECUTIONS.selected} FROM $ks.executions WHERE tenant = ? AND schedule_key = ? "
        "AND (started_ms, firing_id) < (?, ?) LIMIT ?",
        True,
    ),
    insert_tenant=Cql(
        f"INSERT INTO $ks.tenants ({TENANTS.names}) VALUES ({markers(len(TENANTS.columns))}) "
        "IF NOT EXISTS",
        False,
    ),
    select_tenant=Cql(f"SELECT {TENANTS.names} FROM $ks.tenants WHERE name = ?", True),
    # Tenants are few; they are listed in token order (stable across pages).
    list_tenants_first=Cql(f"SELECT {TENANTS.names} FROM $ks.tenants LIMIT ?", True),
    list_tenants_after=Cql(
        f"SELECT {TENANTS.names} FROM $ks.tenants WHERE token(name) > token(?) LIMIT ?", True
    ),
    replace_tenant=Cql(
        f"UPDATE $ks.tenants SET {assignments(TENANTS.others)} WHERE name = ? IF version = ?",
        False,
    ),
    put_token_owner=Cql("INSERT INTO $ks.tenant_tokens (token_hash, tenant) VALUES (?, ?)", True),
    token_owner=Cql("SELECT tenant FROM $ks.tenant_tokens WHERE token_hash = ?", True),
    # The coordinator's clock (now() is a time-based UUID made by the coordinator).
    server_time=Cql("SELECT toUnixTimestamp(now()) AS now_ms FROM system.local", True),
    get_ordering_block=Cql(
        "SELECT delivery_id FROM $ks.ordering_blocks WHERE tenant = ? AND ordering_key = ?",
        True,
    ),
    set_ordering_block=Cql(
        "INSERT INTO $ks.ordering_blocks (tenant, ordering_key, delivery_id) VALUES (?, ?, ?)",
        True,
    ),
    # No redriven_ms: recording a letter again never clears a redrive mark.
    record_dead_letter=Cql(
        f"INSERT INTO $ks.dead_letters ({rows.DEAD_LETTER_INSERTED}) "
        f"VALUES ({markers(len(DEAD_LETTERS.columns) + 1)})",
        True,
    ),
    list_dead_letters=Cql(
        f"SELECT {DEAD_LETTERS.selected} FROM $ks.dead_letters WHERE tenant = ? "
        "AND day = ? AND (dead_ms, firing_id) > (?, ?) AND dead_ms < ? LIMIT ?",
        True,
    ),
    mark_redriven=Cql(
        "UPDATE $ks.dead_letters SET redriven_ms = ? WHERE tenant = ? AND day = ? "
        "AND dead_ms = ? AND firing_id = ?",
        True,
    ),
    claim_trigger=Cql(
        f"INSERT INTO $ks.trigger_requests ({TRIGGER_REQUESTS.names}) "
        f"VALUES ({markers(len(TRIGGER_REQUESTS.columns))}) IF NOT EXISTS USING TTL ?",
        False,
    ),
    confirm_trigger=Cql(
        f"INSERT INTO $ks.trigger_requests ({TRIGGER_REQUESTS.names}) "
        f"VALUES ({markers(len(TRIGGER_REQUESTS.columns))}) USING TTL ?",
        True,
    ),
    set_labels=Cql(
        f"UPDATE $ks.schedules_by_part SET labels = ? WHERE {_SCHEDULE_KEY} IF EXISTS", False
    ),
)

_SEARCH_INDEXED_TERMS = 4
"""At most this many of a selector's equality terms go to the labels index; the
rest of the selector is checked on the rows it returns."""


def search_cql(ks: str, terms: int) -> str:
    """A search's read of one partition: the keys in range (with `terms` labels each
    row must contain), with what filtering needs."""
    contains = " AND labels CONTAINS ?" * terms
    return (
        "SELECT key, state, version, completed_version, labels "
        f"FROM {ks}.schedules_by_part WHERE tenant = ? AND part = ? AND key >= ? "
        f"AND key < ?{contains} LIMIT ?"
    )


def cql(ks: str) -> Statements[Cql]:
    """The CQL of every statement of the store, on keyspace `ks`."""
    schema.check_keyspace(ks)
    return Statements(*(Cql(t.text.replace("$ks", ks), t.idempotent) for t in _CQL.values()))


def prepare(session: Any, statement: Cql) -> Any:
    """Blocking: run it in a worker thread."""
    prepared = session.prepare(statement.text)
    prepared.is_idempotent = statement.idempotent
    return prepared


async def _prepare_all(session: Any, keyspace: str) -> Statements[Any]:
    try:
        prepared = await asyncio.gather(
            *(asyncio.to_thread(prepare, session, text) for text in cql(keyspace).values())
        )
    except Exception as exc:
        mapped = bridge.translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc
    return Statements(*prepared)


class CassandraStore:
    """See `clockwork_svc.abc.Store` for the contract."""

    def __init__(
        self,
        cluster: Any,
        session: Any,
        statements: Statements[Any],
        layout: ClusterLayout,
        firing_retention_s: int,
        write_batch: int = DEFAULT_MAX_STATEMENTS,
        batch_linger_s: float = 0.0,
        read_linger_s: float = 0.0,
        keyspace: str = "",
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
        self._st_keyspace = keyspace
        # A search's statements, by how many labels the index is asked for.
        self._search_statements: dict[int, Any] = {}
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
        speculative_delay_s: float = 0.0,
        tls: CassandraTlsSettings | None = None,
    ) -> CassandraStore:
        """Connect (retrying an unreachable cluster until `connect_timeout_s`), check the
        keyspace's schema and layout, and prepare every statement.

        `batch_linger_s`: how long the per-firing upserts are gathered into one batch
        (they follow a delivery: no client waits on them); `read_linger_s`: the same for
        schedule reads (a worker's read ahead of the due time; an api's answer a client
        waits for, so 0 there); `speculative_delay_s`: after how long an idempotent
        request unanswered is also sent to another node (0: never); `tls`: TLS to the
        nodes. Raises `StoreRefused` at once when the nodes refuse the login or a
        certificate."""
        schema.check_keyspace(keyspace)
        cluster, session = await connecting.connect(
            contact_points,
            local_dc=local_dc,
            username=username,
            password=password,
            tls=tls,
            timeout_s=connect_timeout_s,
            speculative_delay_s=speculative_delay_s,
        )
        try:
            layout, retention_s = await _check_schema(session, keyspace, contact_points)
            statements = await _prepare_all(session, keyspace)
            await node_settings.check(cluster, session)
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
            keyspace,
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
        answer = (await self.insert_schedules([schedule]))[0]
        if isinstance(answer, StoreUnavailable):
            raise answer
        return answer

    async def insert_schedules(
        self, schedules: Sequence[Schedule]
    ) -> list[Schedule | StoreUnavailable | None]:
        # The schedules of one partition go as conditional batches: one Paxos round for
        # the lot. A key given twice is two racing creates: its n-th schedule goes in
        # the partition's n-th round (in one batch both conditions would hold). A batch
        # that fails answers its own schedules with the error; the others go on.
        rounds: dict[int, list[list[_Insert]]] = {}
        seen: Counter[str] = Counter()
        for s in schedules:
            layers = rounds.setdefault(rows.schedule_part(s.key), [])
            if seen[s.key] == len(layers):
                layers.append([])
            layers[seen[s.key]].append(_Insert(s, rows.insert_schedule_params(s)))
            seen[s.key] += 1
        answers: dict[int, Schedule | StoreUnavailable | None] = {}

        async def insert_part(layers: list[list[_Insert]]) -> None:
            for layer in layers:
                for chunk in _cas_chunks(layer):
                    try:
                        found = await self._insert_chunk(chunk)
                    except StoreUnavailable as exc:
                        answers.update((id(i.schedule), exc) for i in chunk)
                        continue
                    for i, answer in zip(chunk, found, strict=True):
                        answers[id(i.schedule)] = answer

        await bridge.gather_bounded(map(insert_part, rounds.values()), _MAX_IN_FLIGHT)
        return [answers[id(s)] for s in schedules]

    async def _insert_chunk(self, chunk: list[_Insert]) -> list[Schedule | None]:
        """Schedules of distinct keys in one partition: None for each one stored, the
        schedule already there for each refused. A conditional batch applies all or
        nothing; when it is refused it names the keys already taken, and the rest go
        again."""
        answers: dict[str, Schedule | None] = {}
        pending = [i.schedule for i in chunk]
        params = {i.schedule.key: i.params for i in chunk}
        while pending:
            if len(pending) == 1:
                page, _ = await self._cas(self._st.insert_schedule, params[pending[0].key])
            else:
                sent = [params[s.key] for s in pending]
                page, _ = await self._cas_batch(self._st.insert_schedule, sent)
            if page.rows[0]["[applied]"]:
                answers.update((s.key, None) for s in pending)
                break
            # The refusal's rows are the rows that exist (a single statement's: just its
            # own `id`); one whose id is null is a progress write for a schedule never
            # created (rows.is_schedule): free.
            taken = {r.get("key", pending[0].key) for r in page.rows if r.get("id") is not None}
            if not taken:
                raise StoreUnavailable("a conditional batch of creates was refused; retry")
            refused = [s for s in pending if s.key in taken]
            winners = await bridge.gather_bounded(map(self._winner, refused), _MAX_IN_FLIGHT)
            answers.update((s.key, w) for s, w in zip(refused, winners, strict=True))
            pending = [s for s in pending if s.key not in taken]
        return [answers[i.schedule.key] for i in chunk]

    async def _winner(self, s: Schedule) -> Schedule | None:
        """After `s`'s create was refused: the schedule stored under its key, read
        linearizably, or None if it is `s` itself (a repeat of a write whose first try
        did apply: each create has its own id)."""
        winner = await self._schedule_serial(s.tenant, s.key)
        if winner is None:
            raise StoreUnavailable(f"schedule {s.tenant}/{s.key} changed during insert; retry")
        return None if winner.id == s.id else winner

    async def _schedule_serial(self, tenant: str, key: str) -> Schedule | None:
        row = await self._serial_first(self._st.select_schedule, rows.schedule_key(tenant, key))
        return rows.schedule(row) if rows.is_schedule(row) else None

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
                        self._st.list_part_keys,
                        (tenant, part, after, need),
                        max_rows=need,
                    )
                    for part in range(rows.SCHEDULE_PARTS)
                ),
                rows.SCHEDULE_PARTS,
            )
            keys = list(
                itertools.islice(heapq.merge(*([r["key"] for r in part] for part in parts)), need)
            )
            if not keys:
                break
            fetched = await bridge.gather_bounded(
                (self._schedule_reads.get(tenant, k) for k in keys), _MAX_IN_FLIGHT
            )
            # A row without an id (progress of a schedule never created) is skipped.
            found += [rows.schedule(r) for r in fetched if rows.is_schedule(r)]
            if len(keys) < need:
                break
            after = keys[-1]
        return found

    async def replace_schedule(self, schedule: Schedule, expected_version: int) -> bool:
        changed = SCHEDULES.pick(SCHEDULES.encode(schedule), SCHEDULE_CHANGE)
        where = rows.schedule_key(schedule.tenant, schedule.key)
        page, repeated = await self._cas(
            self._st.replace_schedule, (*changed, *where, expected_version)
        )
        if page.rows[0]["[applied]"]:
            return True
        if not repeated:
            return False
        # Not applied on a repeat: the first try may have applied after all.
        stored = await self._schedule_serial(schedule.tenant, schedule.key)
        if stored is None:
            return False
        return SCHEDULES.pick(SCHEDULES.encode(stored), SCHEDULE_CHANGE) == changed

    async def record_firing(self, record: FiringRecord) -> None:
        e = record.execution
        progress = progress_values(record.progress)
        writes: list[Statement] = [(self._st.record_execution, EXECUTIONS.encode(e))]
        if record.missed is not None:
            writes.append((self._st.record_execution, EXECUTIONS.encode(record.missed)))
        where = rows.schedule_key(e.tenant, e.schedule_key)
        if record.completes_version is None:
            writes.append((self._st.record_progress, (*progress, *where)))
        else:
            last = (record.completes_version, record.completed_ms, *where)
            writes.append((self._st.record_last_progress, (*progress, *last)))
        if record.dead_letter is not None:
            letter = record.dead_letter
            writes.append((self._st.record_dead_letter, rows.dead_letter_params(letter)))
        if record.ordering_block is not None:
            block = (e.tenant, record.ordering_key, record.ordering_block)
            writes.append((self._st.set_ordering_block, block))
        await self._writes.write_all(writes)

    # --- firings ---------------------------------------------------------------------

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        if not firings:
            return
        bucket_ms = self._layout.bucket_ms
        now_s = time.time()

        def keyed(f: Firing) -> tuple[tuple[int, int], tuple[Any, ...]]:
            bucket = bucket_of(f.fire_at_ms, bucket_ms)
            ttl_s = firing_ttl_s(f.fire_at_ms, self._retention_s, now_s)
            return (f.shard, bucket), rows.firing_params(f, bucket, ttl_s)

        await self._upsert_by_partition(self._st.put_firing, map(keyed, firings))

    async def _upsert_by_partition(
        self, statement: Any, keyed: Iterable[tuple[Hashable, tuple[Any, ...]]]
    ) -> None:
        """Idempotent upserts of (partition, params): one UNLOGGED batch per partition
        and `_BATCH_ROWS` rows (a single mutation on one replica set, not a
        multi-partition batch): measured 3-10x the rows/s of one INSERT per row."""
        partitions: dict[Hashable, list[tuple[Any, ...]]] = {}
        for partition, params in keyed:
            partitions.setdefault(partition, []).append(params)
        await bridge.gather_bounded(
            (
                self._write_chunk(statement, chunk)
                for values in partitions.values()
                for chunk in _chunks(values, _BATCH_ROWS)
            ),
            _MAX_IN_FLIGHT,
        )

    async def _write_chunk(self, statement: Any, chunk: list[tuple[Any, ...]]) -> None:
        """Idempotent upserts into one partition: one request (an UNLOGGED batch is a
        single mutation there)."""
        if len(chunk) == 1:
            await self._run(statement, chunk[0])
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True
        for values in chunk:
            batch.add(statement, values)
        await bridge.execute(self._session, batch)

    async def get_firing(self, shard: int, fire_at_ms: int, firing_id: str) -> Firing | None:
        row = await bridge.first(
            self._session,
            self._st.get_firing,
            (shard, bucket_of(fire_at_ms, self._layout.bucket_ms), fire_at_ms, firing_id),
        )
        return FIRINGS.decode(row) if row is not None and rows.is_firing(row) else None

    async def scan_firings(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        return await self._scan(self._st.scan_bucket, FIRINGS.decode, shard, start, end_ms, limit)

    async def scan_firing_keys(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[FiringKey]:
        return await self._scan(self._st.scan_bucket_keys, _firing_key, shard, start, end_ms, limit)

    async def _scan(
        self,
        statement: Any,
        decode: Callable[[rows.Row], R],
        shard: int,
        start: tuple[int, str],
        end_ms: int,
        limit: int,
    ) -> list[R]:
        """Rows of `statement` (a scan of one bucket) in [start, end_ms) of the shard's
        buckets, in order, at most `limit`: buckets are read a growing window at a time."""
        if limit <= 0 or end_ms <= start[0]:
            return []
        bucket_ms = self._layout.bucket_ms
        bucket, last = bucket_of(start[0], bucket_ms), bucket_of(end_ms - 1, bucket_ms)
        found: list[R] = []
        window = 1
        while bucket <= last and len(found) < limit:
            buckets = range(bucket, min(bucket + window, last + 1))
            need = limit - len(found)
            pages = await asyncio.gather(
                *(
                    self._scan_bucket(statement, decode, shard, b, start, end_ms, need)
                    for b in buckets
                )
            )
            got = sum(len(page) for page in pages)
            for page in pages:  # buckets are disjoint and in time order
                found += page[: limit - len(found)]
            bucket = buckets.stop
            window = _next_window(window, got, limit - len(found))
        return found

    async def _scan_bucket(
        self,
        statement: Any,
        decode: Callable[[rows.Row], R],
        shard: int,
        bucket: int,
        start: tuple[int, str],
        end_ms: int,
        limit: int,
    ) -> list[R]:
        found: list[R] = []
        after = start
        while len(found) < limit:
            need = limit - len(found)
            seen = 0
            async for page in bridge.pages(
                self._session,
                statement,
                (shard, bucket, after[0], after[1], end_ms, need),
                max_rows=need,
                page_size=_PAGE_SIZE,
            ):
                found += [decode(r) for r in page if rows.is_firing(r)]
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
            # A repeated compare-and-set that did apply the first time finds this epoch.
            page, _ = await self._cas(self._st.insert_cursor, (shard, start, epoch))
            row = page.rows[0]
            if row["[applied]"]:
                return ShardCursor(shard, start, epoch)
            while row.get("epoch") is not None:
                seen_epoch, seen_position = int(row["epoch"]), int(row["position_ms"])
                if seen_epoch > epoch:
                    return None
                if seen_epoch == epoch:
                    return ShardCursor(shard, seen_position, epoch)
                page, _ = await self._cas(
                    self._st.take_cursor, (epoch, shard, seen_epoch, seen_position)
                )
                row = page.rows[0]
                if row["[applied]"]:
                    return ShardCursor(shard, seen_position, epoch)
            # The row vanished (only by hand): start over with the insert.

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        page, _ = await self._cas(self._st.advance_cursor, (position_ms, shard, epoch, position_ms))
        row = page.rows[0]
        if row["[applied]"]:
            return True
        # Not applied: fenced off (another epoch, or no cursor), or not a move forward
        # (which includes a repeat whose first try did apply).
        return row.get("epoch") == epoch

    async def load_cursor(self, shard: int) -> ShardCursor | None:
        row = await self._serial_first(self._st.load_cursor, (shard,))
        if row is None or row["epoch"] is None:
            return None
        return ShardCursor(int(row["shard"]), int(row["position_ms"]), int(row["epoch"]))

    # --- executions ----------------------------------------------------------------------

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
        return [EXECUTIONS.decode(r) for r in found]

    # --- helpers -------------------------------------------------------------------------

    # --- ordering keys ----------------------------------------------------------------------

    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str:
        row = await bridge.first(self._session, self._st.get_ordering_block, (tenant, ordering_key))
        return str(row["delivery_id"] or "") if row is not None else ""

    async def set_ordering_block(self, tenant: str, ordering_key: str, delivery_id: str) -> None:
        await self._writes.write(self._st.set_ordering_block, (tenant, ordering_key, delivery_id))

    # --- dead letters -------------------------------------------------------------------------

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
            found += [DEAD_LETTERS.decode(r) for r in page if r["dead_ms"] >= since_ms]
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
        page, repeated = await self._cas(self._st.insert_tenant, TENANTS.encode(tenant))
        if page.rows[0]["[applied]"]:
            return None
        existing = await self._tenant_serial(tenant.name)
        if existing is None:
            raise StoreUnavailable(f"tenant {tenant.name} changed during insert; retry")
        # Not applied on a repeat: the first try may have applied after all.
        return None if repeated and existing == tenant else existing

    async def get_tenant(self, name: str) -> Tenant | None:
        row = await bridge.first(self._session, self._st.select_tenant, (name,))
        return TENANTS.decode(row) if row is not None else None

    async def list_tenants(self, after: str | None, limit: int) -> list[Tenant]:
        statement: Any = self._st.list_tenants_first
        params: tuple[Any, ...] = (limit,)
        if after is not None:
            statement, params = self._st.list_tenants_after, (after, limit)
        found = await bridge.fetch(self._session, statement, params, max_rows=limit)
        return [TENANTS.decode(r) for r in found]

    async def replace_tenant(self, tenant: Tenant, expected_version: int) -> bool:
        values = TENANTS.encode(tenant)
        page, repeated = await self._cas(
            self._st.replace_tenant,
            (*TENANTS.pick(values, TENANTS.others + TENANTS.key), expected_version),
        )
        if page.rows[0]["[applied]"]:
            return True
        # Not applied on a repeat: the first try may have applied after all.
        return repeated and await self._tenant_serial(tenant.name) == tenant

    async def _tenant_serial(self, name: str) -> Tenant | None:
        row = await self._serial_first(self._st.select_tenant, (name,))
        return TENANTS.decode(row) if row is not None else None

    async def put_token_owner(self, token_hash: str, tenant: str) -> None:
        await self._run(self._st.put_token_owner, (token_hash, tenant))

    async def token_owner(self, token_hash: str) -> str | None:
        row = await bridge.first(self._session, self._st.token_owner, (token_hash,))
        return str(row["tenant"]) if row is not None else None

    async def _run(
        self, statement: Any, params: Sequence[Any], *, profile: Any = connecting.PROFILE_DEFAULT
    ) -> bridge.Page:
        return await bridge.execute(self._session, statement, params, profile=profile)

    async def claim_trigger(self, request: TriggerRequest) -> TriggerRequest:
        params = (*TRIGGER_REQUESTS.encode(request), self._trigger_ttl_s())
        page, repeated = await self._cas(self._st.claim_trigger, params)
        row = page.rows[0]
        if row["[applied]"]:
            return request
        if row.get("firing_id") is None:
            raise StoreUnavailable(f"trigger request {request.request_id} expired during claim")
        stored = TRIGGER_REQUESTS.decode(row)
        # Not applied on a repeat: the first try may have applied after all.
        return request if repeated and stored == request else stored

    async def confirm_trigger(self, request: TriggerRequest) -> None:
        written = dataclasses.replace(request, written=True)
        await bridge.execute(
            self._session,
            self._st.confirm_trigger,
            (*TRIGGER_REQUESTS.encode(written), self._trigger_ttl_s()),
        )

    async def set_schedule_labels(self, tenant: str, key: str, labels: Labels) -> bool:
        page, _ = await self._cas(
            self._st.set_labels, (labels_codec.encode(labels), *rows.schedule_key(tenant, key))
        )
        # A repeat of an applied write answers "applied" too: the row exists.
        return bool(page.rows[0]["[applied]"])

    async def search_schedules(
        self, tenant: str, query: ScheduleQuery, after_key: str | None, limit: int, budget: int
    ) -> SearchPage:
        """Reads the tenant's SCHEDULE_PARTS partitions side by side, in key order: each
        round reads up to a batch of each partition's candidates (the index finds the
        equality terms), takes those up to the lowest last key among the partitions
        that had more, and reads in full the ones that match."""
        equalities = query.selector.equalities() if query.selector else []
        terms = labels_codec.encode(tuple(equalities[:_SEARCH_INDEXED_TERMS]))
        statement = await self._search_statement(len(terms))
        # Each partition's batch: when whatever the index returns matches (no state to
        # check, every selector term indexed), a page's worth spread over the
        # partitions; otherwise a page's worth from each, as most rows may not match.
        indexed = query.selector is None or len(query.selector.requirements) == len(terms)
        likely = limit * 2 // rows.SCHEDULE_PARTS if indexed and not query.states else limit
        batch = max(16, min(500, likely))
        start, after = query.start(after_key), after_key
        open_parts = list(range(rows.SCHEDULE_PARTS))
        found: list[Schedule] = []
        scanned = 0
        while open_parts and scanned < budget:
            pages = await bridge.gather_bounded(
                (
                    bridge.fetch(
                        self._session,
                        statement,
                        (tenant, part, start, query.key_end, *terms, batch),
                        max_rows=batch,
                    )
                    for part in open_parts
                ),
                rows.SCHEDULE_PARTS,
            )
            full = [page[-1]["key"] for page in pages if len(page) == batch]
            frontier = min(full) if full else None
            # A partition stays open while it may hold more: it filled its batch, or it
            # had rows past the frontier (read again from there next round).
            open_parts = [
                part
                for part, page in zip(open_parts, pages, strict=True)
                if len(page) == batch
                or (frontier is not None and page[-1:] and page[-1]["key"] > frontier)
            ]
            candidates = sorted(
                (r for page in pages for r in page if frontier is None or r["key"] <= frontier),
                key=lambda r: str(r["key"]),
            )
            scanned += len(candidates)
            keys = [
                r["key"] for r in candidates if r["key"] != after and _candidate_matches(r, query)
            ]
            # Read in full only as many candidates as the page still needs (in key
            # order); more only when some no longer match.
            while keys:
                wanted, keys = keys[: limit - len(found)], keys[limit - len(found) :]
                fetched = await bridge.gather_bounded(
                    (self._schedule_reads.get(tenant, k) for k in wanted), _MAX_IN_FLIGHT
                )
                for row in fetched:
                    if rows.is_schedule(row) and query.matches(schedule := rows.schedule(row)):
                        found.append(schedule)
                        if len(found) == limit:
                            return SearchPage(tuple(found), schedule.key)
            if frontier is None:
                return SearchPage(tuple(found), None)
            start = after = frontier
        return SearchPage(tuple(found), after)

    async def _search_statement(self, terms: int) -> Any:
        statement = self._search_statements.get(terms)
        if statement is None:
            text = search_cql(self._st_keyspace, terms)
            statement = await asyncio.to_thread(prepare, self._session, Cql(text, True))
            self._search_statements[terms] = statement
        return statement

    def _trigger_ttl_s(self) -> int:
        """A request id is kept for a day, and never longer than its firing (a repeat
        finding the id must find the firing too, if it was written)."""
        return min(TRIGGER_REQUEST_TTL_MS // 1000, self._retention_s)

    async def _cas(self, statement: Any, params: Sequence[Any]) -> tuple[bridge.Page, bool]:
        """A compare-and-set, sent again while its outcome is unknown; also says whether
        it was repeated. A repeat whose first try did apply answers "not applied" (its
        condition no longer holds): callers whose write could be that one check for it."""
        return await _until_known(lambda: self._run(statement, params, profile=PROFILE_LWT))

    async def _cas_batch(
        self, statement: Any, params: Sequence[Sequence[Any]]
    ) -> tuple[bridge.Page, bool]:
        """Compare-and-set writes into one partition as one conditional batch (one Paxos
        round), sent again while its outcome is unknown, as `_cas`."""

        def batch() -> BatchStatement:
            b = BatchStatement(batch_type=BatchType.UNLOGGED)
            for p in params:
                b.add(statement, p)
            return b

        return await _until_known(
            lambda: bridge.execute(self._session, batch(), profile=PROFILE_LWT)
        )

    async def _serial_first(self, statement: Any, params: Sequence[Any]) -> rows.Row | None:
        """A linearizable read of one row. It runs a Paxos round too (completing any
        proposal in flight), which can end "result unknown" under contention: it is
        read again then."""
        row, _ = await _until_known(
            lambda: bridge.first(self._session, statement, params, profile=PROFILE_SERIAL_READ)
        )
        return row


def _candidate_matches(row: Any, query: ScheduleQuery) -> bool:
    """Whether a search's key-scan row can match (the full row decides)."""
    state = ScheduleState(row["state"])
    if state is ScheduleState.ACTIVE and row["completed_version"] == row["version"]:
        state = ScheduleState.COMPLETED
    if query.states and state not in query.states:
        return False
    return query.selector is None or query.selector.matches(labels_codec.decode(row["labels"]))


async def _until_known(request: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
    """`request` (a Paxos round), run again while its outcome is unknown, with jittered
    exponential backoff; its result, and whether it was repeated."""
    for attempt in range(_CAS_UNKNOWN_RETRIES):
        try:
            return await request(), attempt > 0
        except bridge.CasResultUnknown:
            await asyncio.sleep(random.uniform(0.5, 1.0) * _CAS_BACKOFF_S * 2**attempt)
    return await request(), True


def _firing_key(row: rows.Row) -> FiringKey:
    return FiringKey(row["fire_at_ms"], row["firing_id"], bool(row["done"]))


def _next_window(window: int, got: int, still_needed: int) -> int:
    """Buckets to query next: double while the range is empty; once rows show up, about
    as many buckets as the density seen suggests (so a dense range is not over-read)."""
    grown = min(window * 2, _MAX_SCAN_WINDOW)
    if got == 0 or still_needed <= 0:
        return grown
    return max(1, min(grown, math.ceil(still_needed * window / got)))


@dataclass(frozen=True, slots=True)
class _Insert:
    """A schedule to create, and the parameters of its compare-and-set."""

    schedule: Schedule
    params: tuple[Any, ...]


def _cas_chunks(inserts: list[_Insert]) -> list[list[_Insert]]:
    """Conditional batches of at most _CAS_BATCH_ROWS schedules and DEFAULT_MAX_BYTES
    of values (Cassandra warns at 5 KiB and refuses 50 KiB); a larger one alone."""
    chunks: list[list[_Insert]] = []
    size = 0
    for i in inserts:
        n = counted_size(i.params)
        if not chunks or len(chunks[-1]) >= _CAS_BATCH_ROWS or size + n > DEFAULT_MAX_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += n
    return chunks


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
