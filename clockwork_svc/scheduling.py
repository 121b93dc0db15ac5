"""Schedule lifecycle operations: create, update, pause, resume, cancel, read.

The gRPC servicer is a thin mapping onto this class. Write order and idempotency:
a schedule row is written (or compare-and-set) first, then its first firing. If the
second write fails, the call fails and repeating it re-arms the schedule: the first
firing of a version is a deterministic function of the stored schedule
(`planning.arm(schedule, schedule.updated_ms)`), so a retry writes the same
row instead of a new one. Concurrent creates are written together (create_batching).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from clockwork_svc.abc import Clock, Store
from clockwork_svc.create_batching import CreateBatcher
from clockwork_svc.domain import planning, trace_context, triggers
from clockwork_svc.domain.labels import Labels
from clockwork_svc.domain.model import (
    Backfilled,
    BulkAction,
    BulkResult,
    ClusterLayout,
    Created,
    Execution,
    Firing,
    NewSchedule,
    Schedule,
    ScheduleDetail,
    ScheduleQuery,
    ScheduleState,
    SearchPage,
    Triggered,
    TriggerRequest,
)
from clockwork_svc.domain.netpolicy import AddressPolicy, literal_address
from clockwork_svc.domain.spec import (
    HttpTarget,
    Limits,
    ScheduleSpec,
    validate_key,
    validate_note,
    validate_spec,
)
from clockwork_svc.errors import (
    AlreadyExists,
    ClockworkError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StoreUnavailable,
)
from clockwork_svc.firing_writes import put_in_time

MAX_BATCH = 1000
# A trigger-now whose firing is not found this long after its request id was stored is
# taken for a call that failed before writing it, and written by the repeat.
TRIGGER_SETTLE_MS = 10_000
MAX_BACKFILL = 1000
MAX_BULK_PER_CALL = 1000
_BULK_CONCURRENCY = 16
_BULK_TARGETS = {
    BulkAction.PAUSE: ScheduleState.PAUSED,
    BulkAction.RESUME: ScheduleState.ACTIVE,
    BulkAction.CANCEL: ScheduleState.CANCELLED,
}
# A search page looks at up to this many schedules per schedule asked for (2,000 at
# least) before it answers, possibly short, with where to go on.
SEARCH_BUDGET_PER_RESULT = 20
# How many upcoming times and latest executions a describe or a preview answers with.
DEFAULT_LISTED = 10
MAX_LISTED = 100
_CAS_ATTEMPTS = 5
# Firing keys read per page when a repeated create looks for its first firing.
_FIND_PAGE = 1000


class Scheduling:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        layout: ClusterLayout,
        limits: Limits,
        targets: AddressPolicy | None = None,
        on_new_firing: Callable[[Firing], None] = lambda firing: None,
        on_created: Callable[[], None] = lambda: None,
        read_ahead_ms: int = planning.READ_AHEAD_MS,
        on_create_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._layout = layout
        self._limits = limits
        self._targets = targets or AddressPolicy()
        self._on_new_firing = on_new_firing
        self._on_created = on_created
        self._read_ahead_s = read_ahead_ms / 1000
        self._creates = CreateBatcher(self._create_all, MAX_BATCH, on_batch=on_create_batch)

    # --- create ------------------------------------------------------------------------

    def _validate(self, spec: ScheduleSpec) -> None:
        validate_spec(spec, self._limits)
        if not isinstance(spec.target, HttpTarget):
            return
        host = urlsplit(spec.target.url).hostname or ""
        address = literal_address(host)
        if address is not None and not self._targets.permits(address):
            raise InvalidArgument(
                "spec.http.url",
                f"callbacks may not reach {address} (loopback, private, link-local or "
                "reserved); an operator can allow networks with --allow-private-targets",
            )

    async def create(
        self,
        tenant: str,
        key: str,
        spec: ScheduleSpec,
        labels: Labels = (),
        trace_parent: str = "",
    ) -> Created:
        """Concurrent creates of one tenant are made together (create_batching).
        `labels` are normalized (domain/labels.py); `trace_parent` is the call's trace
        context, which the schedule keeps."""
        return await self._creates.create(tenant, NewSchedule(key, spec, labels, trace_parent))

    async def create_many(
        self, tenant: str, requests: Sequence[NewSchedule]
    ) -> list[Created | ClockworkError]:
        """Each request's outcome, in order: as `create` would answer it alone."""
        if len(requests) > MAX_BATCH:
            raise InvalidArgument("requests", f"at most {MAX_BATCH} per batch")
        return await self._create_all(tenant, requests)

    async def _create_all(
        self, tenant: str, requests: Sequence[NewSchedule]
    ) -> list[Created | ClockworkError]:
        """Insert the valid requests' schedules together, then their first firings in
        one write (the store groups them by partition). A schedule is acknowledged only
        once its first firing is written; a failure in between leaves it to the retried
        create, which finds it and arms it (`_ensure_armed`)."""
        outcomes: list[Created | ClockworkError | None] = [None] * len(requests)
        planned: list[tuple[int, Schedule, Firing | None]] = []
        now = self._clock.now_ms()
        for i, request in enumerate(requests):
            try:
                validate_key(request.key)
                self._validate(request.spec)
            except ClockworkError as exc:
                outcomes[i] = exc
                continue
            schedule, firing = planning.new_schedule(
                tenant,
                request.key,
                request.spec,
                uuid.uuid4().hex,
                now,
                self._layout,
                request.labels,
            )
            if request.trace_parent:
                schedule = dataclasses.replace(
                    schedule, trace_parent=trace_context.normalized(request.trace_parent)
                )
            planned.append((i, schedule, firing))
        found: list[Schedule | ClockworkError | None]
        try:
            found = list(await self._store.insert_schedules([s for _, s, _ in planned]))
        except ClockworkError as exc:
            found = [exc] * len(planned)
        firings: list[Firing] = []
        inserted: list[tuple[int, Schedule]] = []
        existing: list[tuple[int, Schedule]] = []
        for (i, schedule, firing), other in zip(planned, found, strict=True):
            if isinstance(other, ClockworkError):
                outcomes[i] = other
            elif other is None:
                inserted.append((i, schedule))
                firings += [firing] if firing is not None else []
            elif other.spec != schedule.spec:
                outcomes[i] = AlreadyExists(
                    f"schedule {schedule.key!r} exists with a different spec; "
                    "use update to change it"
                )
            elif other.labels != schedule.labels:
                outcomes[i] = AlreadyExists(
                    f"schedule {schedule.key!r} exists with other labels; "
                    "use SetScheduleLabels to change them"
                )
            else:
                existing.append((i, other))
        if existing:
            await asyncio.gather(
                self._acknowledge_inserted(inserted, firings, outcomes),
                *(self._acknowledge_existing(i, s, outcomes) for i, s in existing),
            )
        elif inserted:
            await self._acknowledge_inserted(inserted, firings, outcomes)
        return [o for o in outcomes if o is not None]

    async def _acknowledge_inserted(
        self,
        inserted: list[tuple[int, Schedule]],
        firings: list[Firing],
        outcomes: list[Created | ClockworkError | None],
    ) -> None:
        try:
            await self._put_due_from_now(*firings)
        except ClockworkError as exc:
            for i, _ in inserted:
                outcomes[i] = exc
            return
        for i, schedule in inserted:
            self._on_created()
            outcomes[i] = Created(schedule, True)

    async def _acknowledge_existing(
        self, i: int, schedule: Schedule, outcomes: list[Created | ClockworkError | None]
    ) -> None:
        try:
            await self._ensure_armed(schedule)
        except ClockworkError as exc:
            outcomes[i] = exc
            return
        outcomes[i] = Created(schedule, False)

    # --- read ------------------------------------------------------------------------

    async def get(self, tenant: str, key: str) -> Schedule:
        validate_key(key)
        schedule = await self._store.get_schedule(tenant, key)
        if schedule is None:
            raise NotFound(f"no schedule {key!r}")
        return schedule

    async def describe(
        self,
        tenant: str,
        key: str,
        upcoming: int = DEFAULT_LISTED,
        executions: int = DEFAULT_LISTED,
    ) -> ScheduleDetail:
        """The schedule, its next `upcoming` occurrence times and its latest
        `executions` (each 0-100; 0 skips the work)."""
        _check_listed(upcoming, "upcoming_count")
        _check_listed(executions, "execution_count")
        schedule = await self.get(tenant, key)
        recent: list[Execution] = []
        if executions:
            recent = await self._store.list_executions(tenant, key, None, executions)
        times = planning.upcoming(schedule, self._clock.now_ms(), upcoming)
        return ScheduleDetail(schedule, tuple(times), tuple(recent))

    def preview(
        self, trigger: triggers.Trigger, from_ms: int | None, count: int = DEFAULT_LISTED
    ) -> list[int]:
        """The occurrence times of a schedule with this trigger created at `from_ms`
        (default now), without creating it."""
        _check_listed(count, "count", minimum=1)
        try:
            triggers.validate(trigger)
        except triggers.TriggerError as exc:
            raise InvalidArgument(exc.field, exc.message) from exc
        return planning.preview(
            trigger, self._clock.now_ms() if from_ms is None else from_ms, count
        )

    async def list_schedules(
        self, tenant: str, after_key: str | None, limit: int
    ) -> list[Schedule]:
        return await self._store.list_schedules(tenant, after_key, limit)

    async def search(
        self, tenant: str, query: ScheduleQuery, after_key: str | None, limit: int
    ) -> SearchPage:
        """The tenant's schedules matching `query`, by key; a page may come back short
        with a next page when the scan reached its budget."""
        return await self._store.search_schedules(
            tenant, query, after_key, limit, max(limit * SEARCH_BUDGET_PER_RESULT, 2000)
        )

    async def set_labels(self, tenant: str, key: str, labels: Labels) -> Schedule:
        """Replace the schedule's labels (normalized); the spec and version stay."""
        validate_key(key)
        if not await self._store.set_schedule_labels(tenant, key, labels):
            raise NotFound(f"no schedule {key!r}")
        return await self.get(tenant, key)

    async def executions(
        self, tenant: str, key: str, before: tuple[int, str] | None, limit: int
    ) -> list[Execution]:
        await self.get(tenant, key)
        return await self._store.list_executions(tenant, key, before, limit)

    # --- changes ---------------------------------------------------------------------

    async def update(
        self, tenant: str, key: str, spec: ScheduleSpec, expected_version: int = 0
    ) -> Schedule:
        self._validate(spec)
        for _ in range(_CAS_ATTEMPTS):
            current = await self.get(tenant, key)
            if expected_version and current.version != expected_version:
                raise Conflict(f"schedule is at version {current.version}, not {expected_version}")
            if current.state is ScheduleState.CANCELLED:
                raise FailedPrecondition("schedule is cancelled")
            if spec.ordering_key != current.spec.ordering_key:
                raise InvalidArgument("spec.ordering_key", "cannot be changed by an update")
            if spec == current.spec:
                await self._ensure_armed(current)
                return current
            state = (
                ScheduleState.PAUSED
                if current.state is ScheduleState.PAUSED
                else (ScheduleState.ACTIVE)
            )
            # A new spec starts a new series of occurrences (fired_count restarts for once).
            changed = dataclasses.replace(current, spec=spec, state=state, fired_count=0)
            result = await self._change(current, changed, arm=state is ScheduleState.ACTIVE)
            if result is not None:
                return result
            if expected_version:
                raise Conflict("schedule changed concurrently")
        raise Conflict("schedule keeps changing concurrently; try again")

    async def pause(self, tenant: str, key: str, note: str = "") -> Schedule:
        """Pause, keeping `note` (who and why) with it until it is resumed."""
        validate_note(note)
        return await self._transition(tenant, key, ScheduleState.PAUSED, note)

    async def resume(self, tenant: str, key: str) -> Schedule:
        return await self._transition(tenant, key, ScheduleState.ACTIVE)

    async def cancel(self, tenant: str, key: str) -> Schedule:
        return await self._transition(tenant, key, ScheduleState.CANCELLED)

    async def _transition(
        self, tenant: str, key: str, target: ScheduleState, note: str = ""
    ) -> Schedule:
        schedule, _, settle = await self._transition_unsettled(tenant, key, target, note)
        if settle:
            await asyncio.sleep(self._read_ahead_s)
        return schedule

    async def _transition_unsettled(
        self, tenant: str, key: str, target: ScheduleState, note: str = ""
    ) -> tuple[Schedule, bool, bool]:
        """The schedule after the transition, whether it changed (False: it was in that
        state already), and whether its acknowledgement must wait READ_AHEAD_MS (it
        changed an active schedule: see `_change`); the caller waits (once for many)."""
        for _ in range(_CAS_ATTEMPTS):
            current = await self.get(tenant, key)
            if current.state is target:
                if target is ScheduleState.ACTIVE:
                    await self._ensure_armed(current)
                return current, False, False
            if current.state is ScheduleState.CANCELLED:
                raise FailedPrecondition("schedule is cancelled")
            if current.state is ScheduleState.COMPLETED and target is not ScheduleState.CANCELLED:
                raise FailedPrecondition("schedule is completed")
            # A pause keeps its note; a resume clears it and starts counting failures
            # afresh; a cancel keeps the last note.
            kept = current.note if target is ScheduleState.CANCELLED else note
            changed = dataclasses.replace(current, state=target, note=kept)
            if target is ScheduleState.ACTIVE:
                changed = dataclasses.replace(changed, failures_in_row=0)
            result = await self._change(
                current, changed, arm=target is ScheduleState.ACTIVE, settle=False
            )
            if result is not None:
                return result, True, current.state is ScheduleState.ACTIVE
        raise Conflict("schedule keeps changing concurrently; try again")

    async def _change(
        self, current: Schedule, changed: Schedule, arm: bool, settle: bool = True
    ) -> Schedule | None:
        """Compare-and-set a new version; None if another change won the race. With
        `settle` False the caller owes the READ_AHEAD_MS wait below."""
        now = self._clock.now_ms()
        changed = dataclasses.replace(
            changed, version=current.version + 1, updated_ms=now, next_fire_ms=None
        )
        firing = None
        if arm:
            changed, firing = planning.arm(changed, now)
        if not await self._store.replace_schedule(changed, current.version):
            return None
        if firing is not None:
            await self._put_due_from_now(firing)
        if settle and current.state is ScheduleState.ACTIVE:
            # A worker may have read the old version up to READ_AHEAD_MS before an
            # occurrence's due time (planning.READ_AHEAD_MS): acknowledge only once
            # every occurrence such a read could still send is due.
            await asyncio.sleep(self._read_ahead_s)
        return changed

    # --- trigger now -------------------------------------------------------------------

    async def trigger(
        self, tenant: str, key: str, payload: bytes | None = None, request_id: str = ""
    ) -> Triggered:
        """Run one occurrence now, outside the timetable; with a request id, a repeat
        of the call answers with the first call's run instead of firing again."""
        validate_key(key)
        if request_id:
            validate_key(request_id, "request_id")
        if payload is not None and len(payload) > self._limits.max_payload_bytes:
            raise InvalidArgument(
                "payload",
                f"is {len(payload)} bytes; the limit is {self._limits.max_payload_bytes}",
            )
        schedule = await self.get(tenant, key)
        if schedule.state is ScheduleState.CANCELLED:
            raise FailedPrecondition(f"schedule {key!r} is cancelled; it cannot be triggered")
        now = self._clock.now_ms()
        firing = planning.triggered_firing(schedule, now, payload)
        if not request_id:
            await self._put(firing)
            return Triggered(firing.delivery_id, firing.firing_id, firing.fire_at_ms, True)
        claim = TriggerRequest(
            tenant,
            key,
            request_id,
            firing.shard,
            firing.fire_at_ms,
            firing.firing_id,
            firing.delivery_id,
            firing.version,
            now,
        )
        stored = await self._store.claim_trigger(claim)
        if stored == claim:
            await self._put(firing)
            await self._store.confirm_trigger(claim)
            return Triggered(firing.delivery_id, firing.firing_id, firing.fire_at_ms, True)
        if not stored.written:
            await self._write_claimed(schedule, stored, payload, now)
        return Triggered(stored.delivery_id, stored.firing_id, stored.fire_at_ms, False)

    async def backfill(self, tenant: str, key: str, start_ms: int, end_ms: int) -> Backfilled:
        """Fire the occurrences the schedule had in [start, end), now, in order, each
        with its delivery id; at most MAX_BACKFILL of them."""
        validate_key(key)
        now = self._clock.now_ms()
        if end_ms <= start_ms:
            raise InvalidArgument("end", "must be after start")
        if end_ms > now:
            raise InvalidArgument("end", "a backfill covers the past: must not be after now")
        schedule = await self.get(tenant, key)
        if schedule.state in (ScheduleState.PAUSED, ScheduleState.CANCELLED):
            state = schedule.state.name.lower()
            raise FailedPrecondition(f"schedule {key!r} is {state}; it cannot be backfilled")
        firings = planning.backfill_firings(schedule, start_ms, end_ms, now, MAX_BACKFILL)
        if firings is None:
            raise InvalidArgument(
                "end",
                f"[start, end) holds more than {MAX_BACKFILL} occurrences; "
                "backfill a shorter range at a time",
            )
        if not firings:
            return Backfilled(0)
        await self._put(*firings)
        return Backfilled(len(firings), firings[0].occurrence_ms, firings[-1].occurrence_ms)

    # --- bulk actions ------------------------------------------------------------------

    async def bulk(
        self,
        tenant: str,
        action: BulkAction,
        query: ScheduleQuery,
        *,
        note: str = "",
        request_id: str = "",
        dry_run: bool = False,
        after_key: str | None = None,
        limit: int = MAX_BULK_PER_CALL,
    ) -> BulkResult:
        """Apply `action` to the schedules `query` matches, in key order, from
        `after_key`: up to `limit` of them (the result says where to go on). Each is
        applied once however often the call is repeated: pause, resume and cancel
        skip a schedule already in their state; a trigger with a request id is one
        trigger per schedule. One READ_AHEAD_MS wait covers every change."""
        if query.selector is None and not query.prefix and not query.states:
            raise InvalidArgument(
                "label_selector", "a bulk action needs a selector, a key prefix or states"
            )
        if not 1 <= limit <= MAX_BULK_PER_CALL:
            raise InvalidArgument("page_size", f"must be between 1 and {MAX_BULK_PER_CALL}")
        validate_note(note)
        if request_id:
            validate_key(request_id, "request_id")
        page = await self.search(tenant, query, after_key, limit)
        keys = [s.key for s in page.schedules]
        if dry_run:
            return BulkResult(len(keys), 0, 0, 0, tuple(keys[:20]), next_after=page.next_after)
        semaphore = asyncio.Semaphore(_BULK_CONCURRENCY)

        async def one(key: str) -> tuple[str, bool, bool, ClockworkError | None]:
            async with semaphore:
                try:
                    applied, settle = await self._bulk_one(tenant, key, action, note, request_id)
                except FailedPrecondition:
                    return key, False, False, None  # nothing to do (cancelled, completed)
                except ClockworkError as exc:
                    return key, False, False, exc
                return key, applied, settle, None

        outcomes = await asyncio.gather(*(one(k) for k in keys))
        if any(settle for _, _, settle, _ in outcomes):
            await asyncio.sleep(self._read_ahead_s)
        failures = tuple((k, str(e)) for k, _, _, e in outcomes if e is not None)
        applied = sum(1 for _, done, _, _ in outcomes if done)
        return BulkResult(
            matched=len(keys),
            applied=applied,
            skipped=len(keys) - applied - len(failures),
            failed=len(failures),
            first_keys=tuple(keys[:20]),
            failures=failures[:100],
            next_after=page.next_after,
        )

    async def _bulk_one(
        self, tenant: str, key: str, action: BulkAction, note: str, request_id: str
    ) -> tuple[bool, bool]:
        """(applied, owes the READ_AHEAD_MS wait)."""
        if action is BulkAction.TRIGGER:
            own_id = ""
            if request_id:
                digest = hashlib.blake2b(f"{request_id}\x1f{key}".encode(), digest_size=16)
                own_id = "bulk-" + digest.hexdigest()
            return (await self.trigger(tenant, key, None, own_id)).triggered, False
        _, changed, settle = await self._transition_unsettled(
            tenant, key, _BULK_TARGETS[action], note
        )
        return changed, settle

    async def _write_claimed(
        self, schedule: Schedule, stored: TriggerRequest, payload: bytes | None, now: int
    ) -> None:
        """An earlier call stored the request id but did not confirm its firing: it
        failed before or after writing it, or is still at it."""
        if await self._store.get_firing(stored.shard, stored.fire_at_ms, stored.firing_id):
            await self._store.confirm_trigger(stored)
            return
        if now - stored.created_ms < TRIGGER_SETTLE_MS:
            raise StoreUnavailable(
                f"request_id {stored.request_id!r}: the first call is still running; retry"
            )
        # Its firing was never written: write it now (not behind the shard's cursor).
        at_version = dataclasses.replace(schedule, version=stored.version)
        firing = planning.triggered_firing(at_version, stored.fire_at_ms, payload)
        if firing.firing_id == stored.firing_id:  # else: for a schedule since deleted
            await self._put(dataclasses.replace(firing, fire_at_ms=now))
        await self._store.confirm_trigger(stored)

    async def _ensure_armed(self, schedule: Schedule) -> None:
        """Write the version's first firing if an earlier call failed before writing it."""
        if schedule.state is not ScheduleState.ACTIVE:
            return
        if schedule.last_fire_ms is not None and schedule.last_fire_ms >= schedule.updated_ms:
            return  # it has fired since its last change, so its first firing was written
        _, firing = planning.arm(schedule, schedule.updated_ms)
        if firing is None:
            return
        rows = await self._stored(firing)
        now = self._clock.now_ms()
        if any(done for _, done in rows):
            return
        if any(due > now - planning.LATE_WRITE_MS for due, _ in rows):
            return  # a row the workers' sweeps still read
        # Missing, or only rows too old for a sweep to be sure to read (an earlier
        # write that Cassandra applied after the call gave up on it): due now.
        await self._put_due_from_now(firing)

    async def _stored(self, firing: Firing) -> list[tuple[int, bool]]:
        """(due time, done) of each stored row of `firing`: at its planned time, or
        later up to now (re-timed or written again by `_put_due_from_now` and `_put`)."""
        start, end = (firing.fire_at_ms, ""), self._clock.now_ms() + 1
        if firing.fire_at_ms >= end:
            found = await self._store.get_firing(firing.shard, firing.fire_at_ms, firing.firing_id)
            return [] if found is None else [(found.fire_at_ms, found.done)]
        rows: list[tuple[int, bool]] = []
        while True:
            keys = await self._store.scan_firing_keys(firing.shard, start, end, _FIND_PAGE)
            rows += [(k.fire_at_ms, k.done) for k in keys if k.firing_id == firing.firing_id]
            if len(keys) < _FIND_PAGE:
                return rows
            start = keys[-1].sort_key

    async def _put_due_from_now(self, *firings: Firing) -> None:
        """Write firings planned earlier (before a compare-and-set of their schedules,
        or by an earlier call). No firing is written due before the writer's now: a
        worker's sweep looks back only its settle window behind now for rows written
        late, and the compare-and-set can take seconds on a loaded store, so one
        planned due before now is due now (`_stored` finds it there)."""
        now = self._clock.now_ms()
        await self._put(
            *(f if f.fire_at_ms >= now else dataclasses.replace(f, fire_at_ms=now) for f in firings)
        )

    async def _put(self, *firings: Firing) -> None:
        await put_in_time(self._store, self._clock, firings, self._on_new_firing)


def _check_listed(value: int, field: str, minimum: int = 0) -> None:
    if not minimum <= value <= MAX_LISTED:
        raise InvalidArgument(field, f"must be between {minimum} and {MAX_LISTED}")
