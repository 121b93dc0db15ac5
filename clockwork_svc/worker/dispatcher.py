"""Handles one due firing in three steps: plan (read the schedule ahead of the due
time, check the firing is current, write the next occurrence), deliver (send once,
settle the result), record (the execution, a retry if one is due, the progress,
then mark the firing done). Metrics and logging go through a FiringObserver.

The order of writes is what makes a crash at any point safe: the next occurrence
is written before delivery (a crash cannot lose the recurrence), the retry and the
execution before `done` (a crash re-delivers rather than loses). Every write is an
idempotent upsert, so re-running a firing after a crash repeats no damage.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from clockwork_svc.abc import Clock, DeliverySink, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import (
    DEFAULT_RESPONSE_CAPTURE_BYTES,
    Execution,
    Firing,
    FiringRecord,
    Outcome,
    Progress,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.firing_writes import put_in_time
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.worker.firing_observer import FiringObserver

log = logging.getLogger(__name__)


class TenantSource(Protocol):
    async def signing_secrets(self, tenant: str) -> tuple[str, ...]:
        """The tenant's active signing secrets, newest first (empty: unsigned)."""

    async def limits(self, tenant: str) -> TenantLimits:
        """The tenant's delivery limits (none for an unknown tenant)."""

    async def defaults(self, tenant: str) -> TenantDefaults:
        """The tenant's default retry policy and relevancy window."""


@dataclass(frozen=True, slots=True)
class _Turn:
    """A firing to deliver or expire, with what was read and planned for it."""

    firing: Firing
    # As stored: writes keep it as it is.
    schedule: Schedule
    # With the tenant's defaults filled in: decisions use it.
    effective: Schedule
    now_ms: int
    # The schedule's progress once this occurrence is recorded (its outcome aside).
    progress: Progress
    # Its last occurrence: the version is marked completed with the other writes.
    completes: bool
    expire: bool
    # How much of the response body the execution keeps (the tenant's choice).
    capture_bytes: int = DEFAULT_RESPONSE_CAPTURE_BYTES
    # The record of the occurrences the misfire policy left out before the next one.
    missed: Execution | None = None


@dataclass(frozen=True, slots=True)
class _Settled:
    """What the firing came to: its execution record and what follows from it."""

    settled: planning.Settled
    finished_ms: int
    stop_schedule: bool = False


class Dispatcher:
    def __init__(
        self,
        store: Store,
        sink: DeliverySink,
        clock: Clock,
        observer: FiringObserver,
        on_new_firing: Callable[[Firing], None],
        tenants: TenantSource | None = None,
        rng: random.Random | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        self._tracing = tracing or Tracing()
        self._sink = sink
        self._clock = clock
        self._observer = observer
        self._on_new_firing = on_new_firing
        self._rng = rng or random.Random()
        self._tenants = tenants

    async def handle(
        self,
        firing: Firing,
        held_ms: int = 0,
        until_due: Callable[[], Awaitable[None]] | None = None,
        skip: bool = False,
        delivered: Callable[[], None] | None = None,
    ) -> Outcome | None:
        """Process one firing; returns its outcome, or None if it was superseded.

        `until_due`, if given, is awaited between the schedule read and everything
        else: the worker reads ahead of the due time (planning.READ_AHEAD_MS) and
        waits there; it raises to put the firing back untouched (nothing is written
        before it returns). `skip`: the schedule's previous delivery is still running
        and its overlap policy is SKIP: the firing is planned (the timetable goes on)
        and recorded SKIPPED, not sent. `delivered`, if given, is called once the
        delivery has returned, before its record is written: the target is free
        again, so the caller can hand the tenant's turn to its next firing.

        Raises StoreUnavailable if the store fails; the caller retries the firing.
        """
        turn = await self._plan(firing, held_ms, until_due)
        if turn is None:
            return None
        if turn.expire:
            expiry = planning.Settled(planning.expired(firing, turn.now_ms), None)
            result = _Settled(expiry, turn.now_ms)
            self._observer.missed(firing.tenant, "expired")
        elif skip:
            reason = "not sent: the previous delivery was still running (overlap SKIP)"
            result = _Settled(
                planning.Settled(planning.skipped(firing, turn.now_ms, reason), None),
                turn.now_ms,
            )
            self._observer.missed(firing.tenant, "overlap")
        else:
            result = await self._deliver(turn)
            if delivered is not None:
                delivered()
        await self._record(turn, result)
        self._observer.finished(firing, result.settled.execution)
        return result.settled.execution.outcome

    async def _plan(
        self,
        firing: Firing,
        held_ms: int,
        until_due: Callable[[], Awaitable[None]] | None,
    ) -> _Turn | None:
        """Read the schedule, wait for the due time and decide. Writes the schedule's
        next occurrence, or marks a superseded firing done (and returns None)."""
        schedule = await self._store.get_schedule(firing.tenant, firing.schedule_key)
        defaults = await self._tenants.defaults(firing.tenant) if self._tenants else None
        effective = _with_defaults(schedule, defaults)
        if until_due is not None:
            self._observer.schedule_read(firing, self._clock.now_ms())
            await until_due()
        now = self._clock.now_ms()
        # Time held while the tenant was sidelined does not count against relevancy.
        plan = planning.plan_dispatch(effective, firing, now, held_ms)
        if plan.action is planning.Action.SUPERSEDED or schedule is None or effective is None:
            await self._unblock_ordering(firing)
            await self._store.mark_done(firing)
            return None
        if plan.next_firing is not None:
            await self._put(plan.next_firing)
        missed = planning.missed_before(effective, firing, plan.next_firing, now)
        if missed is not None:
            self._observer.missed(firing.tenant, "misfire", missed[1])
        progress = plan.progress or Progress(
            schedule.next_fire_ms,
            schedule.last_fire_ms,
            schedule.last_outcome,
            schedule.fired_count,
            schedule.failures_in_row,
        )
        return _Turn(
            firing,
            schedule,
            effective,
            now,
            progress,
            completes=plan.completes and schedule.state is ScheduleState.ACTIVE,
            expire=plan.action is planning.Action.EXPIRE,
            capture_bytes=(
                defaults.response_capture_bytes if defaults else DEFAULT_RESPONSE_CAPTURE_BYTES
            ),
            missed=missed[0] if missed is not None else None,
        )

    async def _deliver(self, turn: _Turn) -> _Settled:
        """Send the payload once and settle the result (nothing is written)."""
        firing, schedule, now = turn.firing, turn.schedule, turn.now_ms
        self._observer.sending(firing, now)
        started_m = self._clock.monotonic()
        signing = await self._tenants.signing_secrets(firing.tenant) if self._tenants else ()
        attributes: dict[str, str | int] | None = (
            {
                "clockwork.tenant": firing.tenant,
                "clockwork.schedule": schedule.key,
                "clockwork.delivery_id": firing.delivery_id,
                "clockwork.attempt": firing.attempt,
            }
            if self._tracing.recording
            else None
        )
        with self._tracing.span(
            "clockwork.deliver", schedule.trace_parent, "client", attributes
        ) as span:
            result = await self._sink.deliver(
                schedule.spec.target,
                schedule.spec.payload if firing.payload is None else firing.payload,
                firing,
                now // 1000,
                signing,
                planning.routing_key(schedule.key, schedule.spec),
                span.traceparent,
            )
            if result.status_code:
                span.set("http.response.status_code", result.status_code)
            if not result.ok:
                span.failed(result.error or f"status {result.status_code}")
        finished = now + int((self._clock.monotonic() - started_m) * 1000)
        self._observer.delivered(now, finished)
        settled = planning.settle(
            turn.effective, firing, result, now, finished, self._rng.random(), turn.capture_bytes
        )
        return _Settled(settled, finished, result.stop_schedule)

    async def _record(self, turn: _Turn, result: _Settled) -> None:
        """Write what the firing came to, then mark it done: the retry and the record
        land before `done`, so a crash re-delivers rather than loses."""
        firing, schedule = turn.firing, turn.schedule
        retry = result.settled.retry
        execution = result.settled.execution
        if retry is not None:
            await self._put(retry)
        if result.stop_schedule:
            await self._stop_schedule(schedule, turn.now_ms)
        # These writes only have to land before the firing is marked done, and none
        # depends on another: they go out together (one request, not four).
        ordering_block = None
        if planning.sequence_key(firing) and retry is not None:
            # The key stays blocked until this delivery succeeds or gives up, even across
            # a crash or a takeover: the block is stored before the firing is done.
            ordering_block = firing.delivery_id
        elif retry is None and _may_block(firing):
            ordering_block = ""
        failed = execution.outcome is Outcome.FAILED
        failures = planning.failures_in_row(turn.progress.failures_in_row, execution.outcome)
        await self._store.record_firing(
            FiringRecord(
                execution,
                dataclasses.replace(
                    turn.progress, last_outcome=execution.outcome, failures_in_row=failures
                ),
                # A plain upsert naming this version (not a compare-and-set).
                completes_version=schedule.version if turn.completes else None,
                completed_ms=result.finished_ms,
                dead_letter=planning.dead_letter(firing, execution) if failed else None,
                ordering_key=planning.sequence_key(firing),
                ordering_block=ordering_block,
                missed=turn.missed,
            )
        )
        await self._store.mark_done(firing)
        if failed and turn.effective.spec.pause_after_failures:
            await self._pause_for_failures(schedule, failures, execution, result.finished_ms)

    async def _put(self, firing: Firing) -> None:
        """Write a firing (a next occurrence or a retry). One written too late is
        written again (`put_in_time`): the cursor may have passed the first row by
        then, and if this worker dies, its successor starts from that cursor."""
        await put_in_time(self._store, self._clock, [firing], self._on_new_firing)

    async def _unblock_ordering(self, firing: Firing) -> None:
        """A retried delivery of an ordering key resolved: lift the key's stored block."""
        if _may_block(firing):
            await self._store.set_ordering_block(firing.tenant, planning.sequence_key(firing), "")

    async def _pause_for_failures(
        self, schedule: Schedule, failures: int, execution: Execution, now: int
    ) -> None:
        """The schedule opted in to pausing after this many failures in a row: pause it
        (the firing is done; a store error leaves the pause to the next failure)."""
        try:
            current = await self._store.get_schedule(schedule.tenant, schedule.key)
            if current is None or current.id != schedule.id:
                return
            paused = planning.paused_for_failures(current, failures, execution, now)
            if paused is not None and await self._store.replace_schedule(paused, current.version):
                self._observer.schedule_paused(schedule.tenant, schedule.key, paused.note)
        except StoreUnavailable as exc:
            log.warning("schedule %s/%s not paused: %s", schedule.tenant, schedule.key, exc)

    async def _stop_schedule(self, schedule: Schedule, now: int) -> None:
        """The target answered 410 Gone: cancel the schedule (as a client's cancel would)."""
        stopped = dataclasses.replace(
            schedule,
            state=ScheduleState.CANCELLED,
            version=schedule.version + 1,
            updated_ms=now,
            next_fire_ms=None,
        )
        if await self._store.replace_schedule(stopped, schedule.version):
            self._observer.schedule_stopped(schedule.tenant, schedule.key)


def _with_defaults(schedule: Schedule | None, defaults: TenantDefaults | None) -> Schedule | None:
    if schedule is None or defaults is None:
        return schedule
    spec = defaults.apply(schedule.spec)
    return schedule if spec is schedule.spec else dataclasses.replace(schedule, spec=spec)


def _may_block(firing: Firing) -> bool:
    """Only a retry (attempt > 1) of an ordering key can hold its stored block: one
    delivery of a key runs at a time, so a block is that delivery's."""
    return bool(planning.sequence_key(firing)) and firing.attempt > 1
