"""Interfaces between Clockwork's parts: store, clock and delivery sink.

The storage contract is written here once; `tests/contract/` checks every
implementation (the embedded SQLite store and the Cassandra store) against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from clockwork_svc.domain.labels import Labels
from clockwork_svc.domain.model import (
    ClusterLayout,
    DeadLetter,
    DeliveryResult,
    Execution,
    Firing,
    FiringKey,
    FiringRecord,
    Schedule,
    ScheduleQuery,
    SearchPage,
    ShardCursor,
    TriggerRequest,
)
from clockwork_svc.domain.spec import Target
from clockwork_svc.domain.tenant import Tenant
from clockwork_svc.errors import StoreUnavailable


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time, milliseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class Store(Protocol):
    """Durable state of a Clockwork cluster.

    Shaped by Cassandra's model: firings live in partitions `(shard, bucket)`
    clustered by `(fire_at_ms, firing_id)`; nothing is deleted in the hot path; every
    write is an idempotent upsert except the few that need a compare-and-set
    (schedule creation and version changes, shard epochs).

    Errors: implementations raise `clockwork_svc.errors.StoreUnavailable` when the
    backend cannot be reached or times out; callers may retry the same call.
    """

    async def close(self) -> None: ...

    async def layout(self) -> ClusterLayout:
        """Shard count and bucket width, fixed when the cluster was created."""

    async def server_time_ms(self) -> int:
        """The store's own clock, ms since the epoch: the reference of cluster time
        (`clockwork_svc.timekeeping`). An embedded store answers with this host's."""

    def use_write_timestamps(self, timestamps: Callable[[], int]) -> None:
        """Stamp every later write with `timestamps()` (microseconds of cluster time)
        where the store orders writes by timestamp (last write wins). A store that
        orders them otherwise (the embedded one: one connection, in commit order)
        ignores it."""

    # --- schedules ---------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> Schedule | None:
        """Insert if no schedule exists for (tenant, key).

        Returns None if inserted, else the existing schedule (unchanged). Atomic:
        of concurrent inserts for the same pair, exactly one succeeds.
        """

    async def insert_schedules(
        self, schedules: Sequence[Schedule]
    ) -> list[Schedule | StoreUnavailable | None]:
        """`insert_schedule` of each, answered in order; cheaper than one call each. Each
        insert is atomic on its own, not the whole. A schedule the store could not
        write is answered with the `StoreUnavailable` it met (it may or may not have
        been inserted), and the others are still answered: a store that fails one
        partition fails only the creates that land there. If this raises, any of
        them may have been inserted."""

    async def get_schedule(self, tenant: str, key: str) -> Schedule | None: ...

    async def list_schedules(
        self, tenant: str, after_key: str | None, limit: int
    ) -> list[Schedule]:
        """The tenant's schedules with key > after_key, ordered by key, at most limit."""

    async def search_schedules(
        self, tenant: str, query: ScheduleQuery, after_key: str | None, limit: int, budget: int
    ) -> SearchPage:
        """The tenant's schedules matching `query`, by key, after `after_key`: at most
        `limit`, having looked at about `budget` schedules at most (a page cut short by
        the budget says where to go on). Never reads another tenant's rows."""

    async def set_schedule_labels(self, tenant: str, key: str, labels: Labels) -> bool:
        """Replace a schedule's labels; False if it does not exist."""

    async def replace_schedule(self, schedule: Schedule, expected_version: int) -> bool:
        """Write spec, state, version, updated and next-fire time of `schedule`
        if the stored version is `expected_version`; False (nothing written) otherwise.
        Runtime columns (written by `record_firing`) are left as they are."""

    async def record_firing(self, record: FiringRecord) -> None:
        """Write every part of `record` or raise; each part is an idempotent upsert, so
        the caller retries the whole record; the parts are written together, in no
        promised order:

        - the execution: the same firing recorded twice keeps one row per firing id;
        - the schedule's runtime columns (its progress). A no-op for a missing schedule
          is not required: it may create a partial row that `get_schedule` ignores;
        - with `completes_version`: that version has no occurrence left, so from now
          on reads report the schedule COMPLETED, with no next fire time and
          `updated_ms` at least `completed_ms`, provided it is still ACTIVE at that
          version. A newer version (any change bumps it) is never affected; not a
          compare-and-set: cheap enough for the firing path;
        - the dead letter, keyed by tenant, dead time and firing id (`redriven_ms` is
          not written, so a redrive mark survives);
        - the ordering key's block, as `set_ordering_block`."""

    # --- firings -----------------------------------------------------------------

    async def put_firings(self, firings: Sequence[Firing]) -> None:
        """Upsert firings. Re-putting an existing firing never clears its `done` flag."""

    async def get_firing(self, shard: int, fire_at_ms: int, firing_id: str) -> Firing | None: ...

    async def scan_firings(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[Firing]:
        """Firings of `shard` with (fire_at_ms, firing_id) > start and fire_at_ms < end_ms,
        in that order, at most `limit`; done ones included (callers skip them).
        Use start = (t, "") to include everything due at t."""

    async def scan_firing_keys(
        self, shard: int, start: tuple[int, str], end_ms: int, limit: int
    ) -> list[FiringKey]:
        """The keys and `done` flags of the firings `scan_firings` would return for the
        same arguments, without their other columns: a cheaper re-read of a range."""

    async def mark_done(self, firing: Firing) -> None:
        """Set the firing's `done` flag (an upsert of one column, never a delete)."""

    # --- shard cursors and fencing -------------------------------------------------

    async def acquire_shard(self, shard: int, epoch: int) -> ShardCursor | None:
        """Make `epoch` the shard's epoch unless a higher one is stored.

        Returns the cursor (a new shard starts at the layout's creation time), or
        None when a higher epoch exists: the caller is stale and must not own the shard.
        """

    async def advance_cursor(self, shard: int, position_ms: int, epoch: int) -> bool:
        """Move the shard's position forward to `position_ms` (never backwards) if the
        stored epoch equals `epoch`. False, with nothing written, if it does not: the
        caller has been fenced off and must drop the shard at once."""

    async def load_cursor(self, shard: int) -> ShardCursor | None: ...

    # --- tenants -----------------------------------------------------------------------

    async def insert_tenant(self, tenant: Tenant) -> Tenant | None:
        """Insert if absent; None if inserted, else the existing tenant (atomic)."""

    async def get_tenant(self, name: str) -> Tenant | None: ...

    async def list_tenants(self, after: str | None, limit: int) -> list[Tenant]:
        """Tenants after `after` (a name from an earlier page) in an order that is stable
        across pages (not necessarily alphabetical), at most `limit`."""

    async def replace_tenant(self, tenant: Tenant, expected_version: int) -> bool:
        """Write every field if the stored version is `expected_version`; else False."""

    async def put_token_owner(self, token_hash: str, tenant: str) -> None:
        """Index a token hash to its tenant (the tenant row stays the authority: a hash
        removed from the tenant is revoked even if its index entry remains)."""

    async def token_owner(self, token_hash: str) -> str | None: ...

    # --- ordering keys -----------------------------------------------------------------

    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str:
        """The delivery id that blocks an ordering key (a retry of it is pending), or ""."""

    async def set_ordering_block(self, tenant: str, ordering_key: str, delivery_id: str) -> None:
        """Upsert the blocking delivery id ("" clears it; never a delete)."""

    # --- dead letters ------------------------------------------------------------------

    async def list_dead_letters(
        self,
        tenant: str,
        since_ms: int,
        until_ms: int,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[DeadLetter]:
        """Dead letters with since <= dead_ms < until, ordered by (dead_ms, firing_id),
        strictly after `after` when given, at most `limit`. Ranges longer than the
        dead-letter retention (30 days) return nothing older than it."""

    async def mark_redriven(self, letter: DeadLetter, redriven_ms: int) -> None: ...

    # --- executions ----------------------------------------------------------------

    async def claim_trigger(self, request: TriggerRequest) -> TriggerRequest:
        """Store a trigger-now request id with its firing, unless that (tenant, key,
        request id) is stored already and younger than TRIGGER_REQUEST_TTL_MS: returns
        the stored request (this one when it was not)."""

    async def confirm_trigger(self, request: TriggerRequest) -> None:
        """Record that the request's firing is written."""

    async def list_executions(
        self, tenant: str, key: str, before: tuple[int, str] | None, limit: int
    ) -> list[Execution]:
        """Executions of a schedule, newest first by (started_ms, firing_id), strictly
        before `before` when given, at most `limit`."""


class DeliverySink(Protocol):
    """Delivers one firing's payload to its target."""

    async def deliver(
        self,
        target: Target,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
        traceparent: str = "",
    ) -> DeliveryResult:
        """Deliver once. With signing secrets, the request carries a Standard Webhooks
        `webhook-signature` (one signature per secret). `key` is the routing key
        (ordering key or schedule key), used as the Kafka message key. `traceparent`
        (W3C trace context) goes out as the `traceparent` header when set."""

    async def close(self) -> None: ...
