"""Schedule lifecycle operations: create, update, pause, resume, cancel, read.

The gRPC servicer is a thin mapping onto this class. Write order and idempotency:
a schedule row is written (or compare-and-set) first, then its first firing. If the
second write fails, the call fails and repeating it re-arms the schedule: the first
firing of a version is a deterministic function of the stored schedule
(`planning.arm(schedule, schedule.updated_ms)`), so a retry writes the same
row instead of a new one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from clockwork_svc.abc import Clock, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import (
    ClusterLayout,
    Created,
    Execution,
    Firing,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.netpolicy import AddressPolicy, literal_address
from clockwork_svc.domain.spec import (
    HttpTarget,
    Limits,
    ScheduleSpec,
    validate_key,
    validate_spec,
)
from clockwork_svc.errors import (
    AlreadyExists,
    ClockworkError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)

MAX_BATCH = 1000
_CAS_ATTEMPTS = 5


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
    ) -> None:
        self._store = store
        self._clock = clock
        self._layout = layout
        self._limits = limits
        self._targets = targets or AddressPolicy()
        self._on_new_firing = on_new_firing
        self._on_created = on_created
        self._read_ahead_s = read_ahead_ms / 1000

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

    async def create(self, tenant: str, key: str, spec: ScheduleSpec) -> Created:
        validate_key(key)
        self._validate(spec)
        now = self._clock.now_ms()
        schedule, firing = planning.new_schedule(
            tenant, key, spec, uuid.uuid4().hex, now, self._layout
        )
        existing = await self._store.insert_schedule(schedule)
        if existing is None:
            if firing is not None:
                await self._put(firing)
            self._on_created()
            return Created(schedule, True)
        if existing.spec != spec:
            raise AlreadyExists(
                f"schedule {key!r} exists with a different spec; use update to change it"
            )
        await self._ensure_armed(existing)
        return Created(existing, False)

    async def create_many(
        self, tenant: str, requests: Sequence[tuple[str, ScheduleSpec]]
    ) -> list[Created | ClockworkError]:
        if len(requests) > MAX_BATCH:
            raise InvalidArgument("requests", f"at most {MAX_BATCH} per batch")

        async def one(key: str, spec: ScheduleSpec) -> Created | ClockworkError:
            try:
                return await self.create(tenant, key, spec)
            except ClockworkError as exc:
                return exc

        return list(await asyncio.gather(*(one(k, s) for k, s in requests)))

    # --- read ------------------------------------------------------------------------

    async def get(self, tenant: str, key: str) -> Schedule:
        validate_key(key)
        schedule = await self._store.get_schedule(tenant, key)
        if schedule is None:
            raise NotFound(f"no schedule {key!r}")
        return schedule

    async def list_schedules(
        self, tenant: str, after_key: str | None, limit: int
    ) -> list[Schedule]:
        return await self._store.list_schedules(tenant, after_key, limit)

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

    async def pause(self, tenant: str, key: str) -> Schedule:
        return await self._transition(tenant, key, ScheduleState.PAUSED)

    async def resume(self, tenant: str, key: str) -> Schedule:
        return await self._transition(tenant, key, ScheduleState.ACTIVE)

    async def cancel(self, tenant: str, key: str) -> Schedule:
        return await self._transition(tenant, key, ScheduleState.CANCELLED)

    async def _transition(self, tenant: str, key: str, target: ScheduleState) -> Schedule:
        for _ in range(_CAS_ATTEMPTS):
            current = await self.get(tenant, key)
            if current.state is target:
                if target is ScheduleState.ACTIVE:
                    await self._ensure_armed(current)
                return current
            if current.state is ScheduleState.CANCELLED:
                raise FailedPrecondition("schedule is cancelled")
            if current.state is ScheduleState.COMPLETED and target is not ScheduleState.CANCELLED:
                raise FailedPrecondition("schedule is completed")
            changed = dataclasses.replace(current, state=target)
            result = await self._change(current, changed, arm=target is ScheduleState.ACTIVE)
            if result is not None:
                return result
        raise Conflict("schedule keeps changing concurrently; try again")

    async def _change(self, current: Schedule, changed: Schedule, arm: bool) -> Schedule | None:
        """Compare-and-set a new version; None if another change won the race."""
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
            await self._put(firing)
        if current.state is ScheduleState.ACTIVE:
            # A worker may have read the old version up to READ_AHEAD_MS before an
            # occurrence's due time (planning.READ_AHEAD_MS): acknowledge only once
            # every occurrence such a read could still send is due.
            await asyncio.sleep(self._read_ahead_s)
        return changed

    async def _ensure_armed(self, schedule: Schedule) -> None:
        """Write the version's first firing if an earlier call failed before writing it."""
        if schedule.state is not ScheduleState.ACTIVE:
            return
        if schedule.last_fire_ms is not None and schedule.last_fire_ms >= schedule.updated_ms:
            return  # it has fired since its last change, so its first firing was written
        _, firing = planning.arm(schedule, schedule.updated_ms)
        if firing is None:
            return
        if await self._store.get_firing(firing.shard, firing.fire_at_ms, firing.firing_id):
            return
        await self._put(
            dataclasses.replace(firing, fire_at_ms=max(firing.fire_at_ms, self._clock.now_ms()))
        )

    async def _put(self, firing: Firing) -> None:
        await self._store.put_firings([firing])
        self._on_new_firing(firing)
