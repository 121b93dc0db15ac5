"""Keeps one Clockwork schedule in step with one `ClockworkSchedule` resource:
create or update it, pause or resume it (`spec.suspend`), cancel it on delete, and
read back what the status shows. Framework-free: the Kopf handlers call this and map
its two exceptions to Kopf's retry semantics."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clockwork_operator.credentials import Clients, Credential, CredentialError
from clockwork_operator.resource import Desired, Observed, SpecError, desired, schedule_key
from clockwork_operator.throttle import ApiThrottle
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import planning, triggers
from clockwork_svc.domain.model import Schedule, ScheduleState
from clockwork_svc.errors import (
    AlreadyExists,
    ClockworkError,
    Conflict,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)


class Invalid(Exception):
    """The resource cannot be applied as it is: retrying will not help until it changes."""


class Busy(Exception):
    """A best-effort call (a status refresh) skipped: the API budget is in use."""


class Retry(Exception):
    """A transient failure (API unreachable, Secret missing): try again after `delay_s`."""

    def __init__(self, message: str, delay_s: float) -> None:
        super().__init__(message)
        self.delay_s = delay_s


# Worth retrying soon: the API unreachable or slow (deadlines included), a limit, a
# concurrent change, a server fault.
_TRANSIENT = (Unavailable, ResourceExhausted, Conflict, Internal)
_CREDENTIAL = (Unauthenticated, PermissionDenied)


@dataclass(frozen=True, slots=True)
class ResourceId:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return schedule_key(self.namespace, self.name, self.uid)


# How many next occurrence times the resource's status lists.
STATUS_UPCOMING = 3


class Reconciler:
    def __init__(self, clients: Clients, throttle: ApiThrottle) -> None:
        self._clients = clients
        self._throttle = throttle

    async def apply(
        self, rid: ResourceId, spec: dict[str, Any], labels: Mapping[str, str] | None = None
    ) -> Observed:
        """Make the schedule match the spec and carry the resource's labels; returns
        what the API then reports."""
        try:
            want = desired(spec)
        except SpecError as exc:
            raise Invalid(str(exc)) from exc
        client = await self._client(rid.namespace, want)
        try:
            async with self._throttle.turn():
                schedule = await self._upsert(client, rid.key, want, dict(labels or {}))
                schedule = await self._suspend(client, schedule, want.suspend)
        except ClockworkError as exc:
            raise _mapped(exc) from exc
        upcoming = planning.upcoming(schedule, int(time.time() * 1000), STATUS_UPCOMING)
        return observed(schedule, upcoming)

    async def refresh(self, rid: ResourceId, spec: dict[str, Any]) -> Observed | None:
        """The schedule as it is now; None if it does not exist (yet). Raises Busy
        instead of waiting when the API budget is in use."""
        try:
            want = desired(spec)
        except SpecError:
            return None
        client = await self._client(rid.namespace, want)
        try:
            async with self._throttle.turn_if_free() as free:
                if not free:
                    raise Busy(rid.key)
                detail = await client.describe(rid.key, STATUS_UPCOMING, 0)
                return observed(detail.schedule, detail.upcoming_ms)
        except NotFound:
            return None
        except ClockworkError as exc:
            raise _mapped(exc) from exc

    async def cancel(self, rid: ResourceId, spec: dict[str, Any], tenant: str | None) -> None:
        """Cancel the schedule (the resource is being deleted). Falls back to the admin
        token for the tenant in the status if the resource's Secret is gone already."""
        try:
            client = await self._client(rid.namespace, desired(spec))
        except (Invalid, Retry, SpecError):
            if tenant is None:
                return  # never applied: nothing to cancel
            client = self._clients.admin(tenant)
        try:
            async with self._throttle.turn():
                await client.cancel(rid.key)
        except (NotFound, FailedPrecondition):
            return  # never created, or finished/cancelled already
        except ClockworkError as exc:
            raise _mapped(exc) from exc

    async def _client(self, namespace: str, want: Desired) -> ClockworkClient:
        try:
            credential: Credential = await self._clients.credential(namespace, want.secret)
        except CredentialError as exc:
            raise Retry(str(exc), 30) from exc
        return self._clients.client(credential)

    async def _upsert(
        self, client: ClockworkClient, key: str, want: Desired, labels: dict[str, str]
    ) -> Schedule:
        try:
            return (await client.create(key, want.spec, labels)).schedule
        except AlreadyExists:
            pass
        current = await client.get(key)
        if current.state is ScheduleState.CANCELLED:
            raise Invalid(f"schedule {key} was cancelled; re-create the resource")
        if current.spec != want.spec:
            current = await client.update(key, want.spec)
        if dict(current.labels) != labels:
            current = await client.set_labels(key, labels)
        return current

    async def _suspend(
        self, client: ClockworkClient, schedule: Schedule, suspend: bool
    ) -> Schedule:
        if suspend and schedule.state is ScheduleState.ACTIVE:
            return await client.pause(schedule.key)
        if not suspend and schedule.state is ScheduleState.PAUSED:
            return await client.resume(schedule.key)
        return schedule


def observed(schedule: Schedule, upcoming_ms: Sequence[int] = ()) -> Observed:
    return Observed(
        key=schedule.key,
        state=schedule.state.name,
        next_fire_ms=schedule.next_fire_ms,
        last_fire_ms=schedule.last_fire_ms,
        last_outcome=schedule.last_outcome.name if schedule.last_outcome else None,
        fired_count=schedule.fired_count,
        description=triggers.describe(schedule.spec.trigger),
        tenant=schedule.tenant,
        upcoming_ms=tuple(upcoming_ms),
        note=schedule.note,
    )


def _mapped(exc: ClockworkError) -> Exception:
    """What a failed call means for the resource: fix the spec (Invalid), or try again
    later (Retry)."""
    status = exc.status.name if exc.status else type(exc).__name__
    if isinstance(exc, InvalidArgument):
        return Invalid(f"rejected by Clockwork: {exc}")
    if isinstance(exc, _CREDENTIAL):
        return Retry(f"credential refused ({status}): {exc}", 60)
    if isinstance(exc, _TRANSIENT):
        return Retry(f"Clockwork API {status}: {exc}", 10)
    return Invalid(f"Clockwork API {status}: {exc}")
