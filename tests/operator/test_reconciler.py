"""The reconciler against a fake client: what each error of a call means for the
resource (fix the spec, retry soon, retry after the credential is fixed, or nothing to
do), decided from the client's `ClockworkError` subclasses alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest

from clockwork_operator.credentials import Credential
from clockwork_operator.reconciler import Busy, Invalid, Reconciler, ResourceId, Retry
from clockwork_operator.resource import SecretRef, desired
from clockwork_operator.throttle import ApiThrottle
from clockwork_svc.api.status import error_of
from clockwork_svc.domain.model import Created, Schedule, ScheduleDetail, ScheduleState
from clockwork_svc.domain.spec import ScheduleSpec
from clockwork_svc.errors import ClockworkError

Code = grpc.StatusCode
RID = ResourceId("shop", "nightly", "uid-1")
SPEC: dict[str, Any] = {
    "schedule": {"every": "1m"},
    "target": {"http": {"url": "https://example.com/hook"}},
}


class FakeClient:
    """Answers from the schedules it holds; `fail` raises an error for a method."""

    def __init__(self) -> None:
        self.schedules: dict[str, Schedule] = {}
        self.fail: dict[str, ClockworkError] = {}
        self.calls: list[str] = []

    def _call(self, method: str) -> None:
        self.calls.append(method)
        if method in self.fail:
            raise self.fail[method]

    async def create(
        self, key: str, spec: ScheduleSpec, labels: dict[str, str] | None = None
    ) -> Created:
        self._call("create")
        wanted = tuple(sorted((labels or {}).items()))
        if key in self.schedules:
            if self.schedules[key].spec != spec or self.schedules[key].labels != wanted:
                raise error_of(Code.ALREADY_EXISTS, f"schedule {key!r} exists")
            return Created(self.schedules[key], False)
        self.schedules[key] = Schedule(
            "shop",
            key,
            "id",
            spec,
            ScheduleState.ACTIVE,
            1,
            0,
            0,
            0,
            next_fire_ms=60_000,
            labels=wanted,
        )
        return Created(self.schedules[key], True)

    async def set_labels(self, key: str, labels: dict[str, str]) -> Schedule:
        self._call("set_labels")
        current = await self.get(key)
        self.schedules[key] = dataclasses.replace(current, labels=tuple(sorted(labels.items())))
        return self.schedules[key]

    async def get(self, key: str) -> Schedule:
        self._call("get")
        if key not in self.schedules:
            raise error_of(Code.NOT_FOUND, f"no schedule {key!r}")
        return self.schedules[key]

    async def describe(self, key: str, upcoming: int, executions: int) -> ScheduleDetail:
        self._call("describe")
        schedule = await self.get(key)
        return ScheduleDetail(schedule, (schedule.next_fire_ms or 0,)[:upcoming])

    async def _set(self, key: str, **changes: Any) -> Schedule:
        current = await self.get(key)
        self.schedules[key] = dataclasses.replace(current, version=current.version + 1, **changes)
        return self.schedules[key]

    async def update(self, key: str, spec: ScheduleSpec) -> Schedule:
        self._call("update")
        return await self._set(key, spec=spec)

    async def pause(self, key: str) -> Schedule:
        self._call("pause")
        return await self._set(key, state=ScheduleState.PAUSED)

    async def resume(self, key: str) -> Schedule:
        self._call("resume")
        return await self._set(key, state=ScheduleState.ACTIVE)

    async def cancel(self, key: str) -> Schedule:
        self._call("cancel")
        current = await self.get(key)
        if current.state is ScheduleState.CANCELLED:
            raise error_of(Code.FAILED_PRECONDITION, f"schedule {key!r} is cancelled")
        return await self._set(key, state=ScheduleState.CANCELLED)


class FakeClients:
    def __init__(self, client: FakeClient) -> None:
        self._client = client

    async def credential(self, namespace: str, ref: SecretRef | None) -> Credential:
        return Credential("token", namespace)

    def client(self, credential: Credential) -> FakeClient:
        return self._client

    def admin(self, tenant: str | None = None) -> FakeClient:
        return self._client


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


@pytest.fixture
def reconciler(client: FakeClient) -> Reconciler:
    return Reconciler(FakeClients(client), ApiThrottle(1000, 4))  # type: ignore[arg-type]


async def test_apply_creates_then_updates_and_suspends(
    reconciler: Reconciler, client: FakeClient
) -> None:
    seen = await reconciler.apply(RID, SPEC)
    assert (seen.state, seen.next_fire_ms, seen.tenant) == ("ACTIVE", 60_000, "shop")
    changed = {**SPEC, "schedule": {"every": "2m"}, "suspend": True}
    seen = await reconciler.apply(RID, changed)
    assert seen.state == "PAUSED"
    assert client.calls == ["create", "create", "get", "update", "get", "pause", "get"]
    assert client.schedules[RID.key].spec == desired(changed).spec


async def test_a_cancelled_schedule_is_not_brought_back(
    reconciler: Reconciler, client: FakeClient
) -> None:
    await reconciler.apply(RID, SPEC)
    await client.cancel(RID.key)
    with pytest.raises(Invalid, match="was cancelled"):
        await reconciler.apply(RID, {**SPEC, "schedule": {"every": "2m"}})


@pytest.mark.parametrize(
    ("code", "outcome", "delay_s", "message"),
    [
        (Code.INVALID_ARGUMENT, Invalid, None, "rejected by Clockwork: spec.http.url: bad"),
        (Code.UNAUTHENTICATED, Retry, 60, "credential refused (UNAUTHENTICATED): "),
        (Code.PERMISSION_DENIED, Retry, 60, "credential refused (PERMISSION_DENIED): "),
        (Code.UNAVAILABLE, Retry, 10, "Clockwork API UNAVAILABLE: "),
        (Code.DEADLINE_EXCEEDED, Retry, 10, "Clockwork API DEADLINE_EXCEEDED: "),
        (Code.RESOURCE_EXHAUSTED, Retry, 10, "Clockwork API RESOURCE_EXHAUSTED: "),
        (Code.ABORTED, Retry, 10, "Clockwork API ABORTED: "),
        (Code.INTERNAL, Retry, 10, "Clockwork API INTERNAL: "),
        (Code.UNKNOWN, Retry, 10, "Clockwork API UNKNOWN: "),
        (Code.FAILED_PRECONDITION, Invalid, None, "Clockwork API FAILED_PRECONDITION: "),
        (Code.UNIMPLEMENTED, Invalid, None, "Clockwork API UNIMPLEMENTED: "),
    ],
)
async def test_what_a_failed_call_means_for_the_resource(
    reconciler: Reconciler,
    client: FakeClient,
    code: grpc.StatusCode,
    outcome: type[Exception],
    delay_s: float | None,
    message: str,
) -> None:
    details = "spec.http.url: bad" if code is Code.INVALID_ARGUMENT else "details"
    client.fail["create"] = error_of(code, details)
    with pytest.raises(outcome) as err:
        await reconciler.apply(RID, SPEC)
    assert str(err.value).startswith(message)
    assert str(err.value).endswith(details)
    if isinstance(err.value, Retry):
        assert err.value.delay_s == delay_s


async def test_refresh_of_a_missing_schedule_is_none(reconciler: Reconciler) -> None:
    assert await reconciler.refresh(RID, SPEC) is None


async def test_refresh_maps_other_errors(reconciler: Reconciler, client: FakeClient) -> None:
    client.fail["describe"] = error_of(Code.UNAVAILABLE, "api restarting")
    with pytest.raises(Retry, match="UNAVAILABLE: api restarting"):
        await reconciler.refresh(RID, SPEC)


async def test_refresh_reports_the_next_occurrence_times(
    reconciler: Reconciler, client: FakeClient
) -> None:
    await reconciler.apply(RID, SPEC)
    seen = await reconciler.refresh(RID, SPEC)
    assert seen is not None and seen.upcoming_ms == (60_000,)
    assert client.calls[-2:] == ["describe", "get"]


async def test_cancel_of_a_missing_or_finished_schedule_is_done(
    reconciler: Reconciler, client: FakeClient
) -> None:
    await reconciler.cancel(RID, SPEC, "shop")  # never created: NOT_FOUND
    await reconciler.apply(RID, SPEC)
    await reconciler.cancel(RID, SPEC, "shop")
    await reconciler.cancel(RID, SPEC, "shop")  # cancelled already: FAILED_PRECONDITION
    assert client.calls[-2:] == ["cancel", "get"]
    client.fail["cancel"] = error_of(Code.UNAVAILABLE, "down")
    with pytest.raises(Retry):
        await reconciler.cancel(RID, SPEC, "shop")


async def test_a_refresh_is_skipped_while_the_api_budget_is_in_use(client: FakeClient) -> None:
    reconciler = Reconciler(FakeClients(client), ApiThrottle(1000, 1))  # type: ignore[arg-type]
    await reconciler.apply(RID, SPEC)
    throttle = reconciler._throttle
    async with throttle.turn():  # the one slot is taken (an apply in progress)
        with pytest.raises(Busy):
            await reconciler.refresh(RID, SPEC)
    assert await reconciler.refresh(RID, SPEC) is not None


async def test_apply_carries_the_resources_labels(
    reconciler: Reconciler, client: FakeClient
) -> None:
    await reconciler.apply(RID, SPEC, {"team": "payments"})
    assert client.schedules[RID.key].labels == (("team", "payments"),)
    client.calls.clear()
    await reconciler.apply(RID, SPEC, {"team": "payments", "env": "prod"})
    assert client.schedules[RID.key].labels == (("env", "prod"), ("team", "payments"))
    assert client.calls == ["create", "get", "set_labels", "get"]
    client.calls.clear()
    await reconciler.apply(RID, SPEC, {"team": "payments", "env": "prod"})
    assert client.calls == ["create"]  # nothing to change
