"""Keeps one Clockwork schedule in step with one `ClockworkSchedule` resource:
create or update it, pause or resume it (`spec.suspend`), cancel it on delete, and
read back what the status shows. Framework-free: the Kopf handlers call this and map
its two exceptions to Kopf's retry semantics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from clockwork_operator.credentials import Clients, Credential, CredentialError
from clockwork_operator.resource import Desired, Observed, SpecError, desired, schedule_key
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import triggers


class Invalid(Exception):
    """The resource cannot be applied as it is: retrying will not help until it changes."""


class Retry(Exception):
    """A transient failure (API unreachable, Secret missing): try again after `delay_s`."""

    def __init__(self, message: str, delay_s: float) -> None:
        super().__init__(message)
        self.delay_s = delay_s


_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}
_CREDENTIAL = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


@dataclass(frozen=True, slots=True)
class ResourceId:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return schedule_key(self.namespace, self.name, self.uid)


class Reconciler:
    def __init__(self, clients: Clients) -> None:
        self._clients = clients

    async def apply(self, rid: ResourceId, spec: dict[str, Any]) -> Observed:
        """Make the schedule match the spec; returns what the API then reports."""
        try:
            want = desired(spec)
        except SpecError as exc:
            raise Invalid(str(exc)) from exc
        client = await self._client(rid.namespace, want)
        try:
            schedule = await self._upsert(client, rid.key, want)
            schedule = await self._suspend(client, schedule, want.suspend)
        except grpc.aio.AioRpcError as exc:
            raise _mapped(exc) from exc
        return observed(schedule)

    async def refresh(self, rid: ResourceId, spec: dict[str, Any]) -> Observed | None:
        """The schedule as it is now; None if it does not exist (yet)."""
        try:
            want = desired(spec)
        except SpecError:
            return None
        client = await self._client(rid.namespace, want)
        try:
            return observed(await client.get(rid.key))
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return None
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
            await client.cancel(rid.key)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                return  # never created, or finished/cancelled already
            raise _mapped(exc) from exc

    async def _client(self, namespace: str, want: Desired) -> ClockworkClient:
        try:
            credential: Credential = await self._clients.credential(namespace, want.secret)
        except CredentialError as exc:
            raise Retry(str(exc), 30) from exc
        return self._clients.client(credential)

    async def _upsert(self, client: ClockworkClient, key: str, want: Desired) -> pb.Schedule:
        try:
            return (await client.create(key, want.spec)).schedule
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.ALREADY_EXISTS:
                raise
        current = await client.get(key)
        if current.state == pb.CANCELLED:
            raise Invalid(f"schedule {key} was cancelled; re-create the resource")
        return await client.update(key, want.spec)

    async def _suspend(
        self, client: ClockworkClient, schedule: pb.Schedule, suspend: bool
    ) -> pb.Schedule:
        if suspend and schedule.state == pb.ACTIVE:
            return await client.pause(schedule.key)
        if not suspend and schedule.state == pb.PAUSED:
            return await client.resume(schedule.key)
        return schedule


def observed(schedule: pb.Schedule) -> Observed:
    spec = convert.spec_from_pb(schedule.spec)
    return Observed(
        key=schedule.key,
        state=pb.ScheduleState.Name(schedule.state),
        next_fire_ms=_ms(schedule, "next_fire_time"),
        last_fire_ms=_ms(schedule, "last_fire_time"),
        last_outcome=pb.Outcome.Name(schedule.last_outcome) if schedule.last_outcome else None,
        fired_count=schedule.fired_count,
        description=triggers.describe(spec.trigger),
        tenant=schedule.tenant,
    )


def _ms(schedule: pb.Schedule, name: str) -> int | None:
    if not schedule.HasField(name):  # type: ignore[arg-type]
        return None
    return int(getattr(schedule, name).ToMilliseconds())


def _mapped(exc: grpc.aio.AioRpcError) -> Exception:
    code, details = exc.code(), exc.details() or ""
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return Invalid(f"rejected by Clockwork: {details}")
    if code in _CREDENTIAL:
        return Retry(f"credential refused ({code.name}): {details}", 60)
    if code in _TRANSIENT:
        return Retry(f"Clockwork API {code.name}: {details}", 10)
    return Invalid(f"Clockwork API {code.name}: {details}")
