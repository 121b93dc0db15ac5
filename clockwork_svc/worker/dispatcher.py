"""Handles one due firing: check it is current (read ahead of its due time), plan
the next occurrence, deliver, record the outcome, write a retry if one is due, and
mark the firing done.

The order of writes is what makes a crash at any point safe: the next occurrence
is written before delivery (a crash cannot lose the recurrence), the retry and the
execution before `done` (a crash re-delivers rather than loses). Every write is an
idempotent upsert, so re-running a firing after a crash repeats no damage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from clockwork_svc.abc import Clock, DeliverySink, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import (
    ClusterLayout,
    Firing,
    Outcome,
    Progress,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.observability.metrics import Metrics

log = logging.getLogger(__name__)


class TenantSource(Protocol):
    async def signing_secrets(self, tenant: str) -> tuple[str, ...]:
        """The tenant's active signing secrets, newest first (empty: unsigned)."""

    async def limits(self, tenant: str) -> TenantLimits:
        """The tenant's delivery limits (none for an unknown tenant)."""

    async def defaults(self, tenant: str) -> TenantDefaults:
        """The tenant's default retry policy and relevancy window."""


class Dispatcher:
    def __init__(
        self,
        store: Store,
        sink: DeliverySink,
        clock: Clock,
        layout: ClusterLayout,
        metrics: Metrics,
        on_new_firing: Callable[[Firing], None],
        tenants: TenantSource | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._sink = sink
        self._clock = clock
        self._layout = layout
        self._metrics = metrics
        self._on_new_firing = on_new_firing
        self._rng = rng or random.Random()
        self._tenants = tenants

    async def handle(
        self,
        firing: Firing,
        held_ms: int = 0,
        until_due: Callable[[], Awaitable[None]] | None = None,
    ) -> Outcome | None:
        """Process one firing; returns its outcome, or None if it was superseded.

        `until_due`, if given, is awaited between the schedule read and everything
        else: the worker reads ahead of the due time (planning.READ_AHEAD_MS) and
        waits there; it raises to put the firing back untouched (nothing is written
        before it returns).

        Raises StoreUnavailable if the store fails; the caller retries the firing.
        """
        schedule = await self._store.get_schedule(firing.tenant, firing.schedule_key)
        # Decisions use the spec with the tenant's defaults filled in; writes keep the
        # stored spec as it is.
        effective = await self._with_tenant_defaults(schedule)
        if until_due is not None:
            # Read READ_AHEAD_MS early: a read that returns after the due time (a slow
            # or paused store) is the store's share of this firing's lag.
            late_ms = self._clock.now_ms() - firing.fire_at_ms
            self._metrics.read_late.observe(max(0, late_ms) / 1000)
            await until_due()
        now = self._clock.now_ms()
        # Time held while the tenant was sidelined does not count against relevancy.
        plan = planning.plan_dispatch(effective, firing, self._layout, now, held_ms)
        if plan.action is planning.Action.SUPERSEDED or schedule is None:
            await self._unblock_ordering(firing)
            await self._store.mark_done(firing)
            return None
        if plan.next_firing is not None:
            await self._store.put_firings([plan.next_firing])
            self._on_new_firing(plan.next_firing)
        # Its last occurrence: the version is marked completed with the other writes.
        completes = plan.completes and schedule.state is ScheduleState.ACTIVE
        progress = plan.progress or Progress(
            schedule.next_fire_ms,
            schedule.last_fire_ms,
            schedule.last_outcome,
            schedule.fired_count,
        )
        if plan.action is planning.Action.EXPIRE:
            execution = planning.expired(firing, now)
            await self._store.record_execution(execution)
            if completes:
                await self._store.complete_schedule(
                    schedule.tenant, schedule.key, schedule.version, now
                )
            await self._unblock_ordering(firing)
            await self._finish(firing, dataclasses.replace(progress, last_outcome=Outcome.EXPIRED))
            self._metrics.firings.labels(Outcome.EXPIRED.value).inc()
            return Outcome.EXPIRED

        self._metrics.fire_lag.observe(max(0, now - firing.fire_at_ms) / 1000)
        started_m = self._clock.monotonic()
        signing = await self._tenants.signing_secrets(firing.tenant) if self._tenants else ()
        result = await self._sink.deliver(
            schedule.spec.target,
            schedule.spec.payload,
            firing,
            now // 1000,
            signing,
            planning.routing_key(schedule.key, schedule.spec),
        )
        finished = now + int((self._clock.monotonic() - started_m) * 1000)
        self._metrics.delivery_duration.observe(max(0, finished - now) / 1000)
        settled = planning.settle(
            effective or schedule,
            firing,
            self._layout,
            result,
            now,
            finished,
            self._rng.random(),
        )
        if settled.retry is not None:
            await self._store.put_firings([settled.retry])
            self._on_new_firing(settled.retry)
        if result.stop_schedule:
            await self._stop_schedule(schedule, now)
        outcome = settled.execution.outcome
        # These writes only have to land before the firing is marked done, and none
        # depends on another: they go out together (one round trip of latency, not four).
        writes = [
            self._store.record_execution(settled.execution),
            self._store.record_progress(
                firing.tenant,
                firing.schedule_key,
                dataclasses.replace(progress, last_outcome=outcome),
            ),
        ]
        if completes:
            # A plain upsert naming this version (not a compare-and-set), so it
            # travels with the other writes.
            writes.append(
                self._store.complete_schedule(
                    schedule.tenant, schedule.key, schedule.version, finished
                )
            )
        if outcome is Outcome.FAILED:
            writes.append(
                self._store.record_dead_letter(planning.dead_letter(firing, settled.execution))
            )
        if firing.ordering_key and settled.retry is not None:
            # The key stays blocked until this delivery succeeds or gives up, even across
            # a crash or a takeover: the block is stored before the firing is done.
            writes.append(
                self._store.set_ordering_block(
                    firing.tenant, firing.ordering_key, firing.delivery_id
                )
            )
        elif settled.retry is None:
            writes.append(self._unblock_ordering(firing))
        await _all(writes)
        await self._store.mark_done(firing)
        self._metrics.firings.labels(outcome.value).inc()
        if outcome is not Outcome.SUCCEEDED:
            log.info(
                "delivery %s attempt %d: %s %s",
                firing.delivery_id,
                firing.attempt,
                outcome.value,
                settled.execution.error,
            )
        return outcome

    async def _with_tenant_defaults(self, schedule: Schedule | None) -> Schedule | None:
        if schedule is None or self._tenants is None:
            return schedule
        defaults = await self._tenants.defaults(schedule.tenant)
        spec = defaults.apply(schedule.spec)
        return schedule if spec is schedule.spec else dataclasses.replace(schedule, spec=spec)

    async def _unblock_ordering(self, firing: Firing) -> None:
        """A retried delivery of an ordering key resolved: lift the key's stored block.
        Only a retry (attempt > 1) can be the blocker: one delivery of a key runs at a
        time, so the block is this delivery's."""
        if firing.ordering_key and firing.attempt > 1:
            await self._store.set_ordering_block(firing.tenant, firing.ordering_key, "")

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
            log.info(
                "schedule %s/%s cancelled: target answered 410 Gone", schedule.tenant, schedule.key
            )

    async def _finish(self, firing: Firing, progress: Progress) -> None:
        await self._store.record_progress(firing.tenant, firing.schedule_key, progress)
        await self._store.mark_done(firing)


async def _all(writes: Sequence[Awaitable[None]]) -> None:
    """Await every write; then raise the first failure (none is left running)."""
    results = await asyncio.gather(*writes, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
