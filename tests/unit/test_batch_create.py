"""e2e.workload.BatchCreate: a batch create is sent until every entry is acknowledged,
retrying with the same keys, and anything else fails loudly. The client is a fake:
this is the retry logic alone (the api-restart and Cassandra-restart nemeses run it
against real servers)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from clockwork_svc.api.status import error_of
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Created, Schedule, ScheduleState
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.errors import ClockworkError, PermissionDenied
from e2e.workload import BatchCreate

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def spec() -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(1_700_000_000_000), HttpTarget("http://x/"))


def created(key: str) -> Created:
    schedule = Schedule("t", key, f"id-{key}", spec(), ScheduleState.ACTIVE, 1, 0, 0, 0)
    return Created(schedule, True)


class FakeClient:
    """Answers each call from a script: the per-key error codes (the rest created), or
    an exception."""

    def __init__(self, script: list[dict[str, grpc.StatusCode] | Exception]) -> None:
        self.script = script
        self.calls: list[list[str]] = []

    async def create_many(
        self, entries: Sequence[tuple[str, ScheduleSpec]]
    ) -> list[Created | ClockworkError]:
        self.calls.append([key for key, _ in entries])
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return [
            error_of(step[key], f"code {step[key].name}") if key in step else created(key)
            for key, _ in entries
        ]


def unavailable_call() -> ClockworkError:
    return error_of(UNAVAILABLE, "api restarting")


async def collect(creating: BatchCreate) -> list[tuple[str, str]]:
    return [(key, sid) async for key, sid, _ in creating.acknowledgements()]


async def test_unavailable_entries_are_sent_again_with_the_same_keys() -> None:
    client = FakeClient([unavailable_call(), {"b": UNAVAILABLE}, {}])
    creating = BatchCreate(client, [("a", spec()), ("b", spec())], timeout_s=10)  # type: ignore[arg-type]
    assert await collect(creating) == [("a", "id-a"), ("b", "id-b")]
    assert client.calls == [["a", "b"], ["a", "b"], ["b"]]
    assert creating.retried == 2


async def test_any_other_answer_fails() -> None:
    client = FakeClient([{"b": INVALID}])
    creating = BatchCreate(client, [("a", spec()), ("b", spec())], timeout_s=10)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="create b"):
        await collect(creating)


async def test_a_non_retryable_call_error_is_raised() -> None:
    denied = error_of(grpc.StatusCode.PERMISSION_DENIED, "no")
    creating = BatchCreate(FakeClient([denied]), [("a", spec())], timeout_s=10)  # type: ignore[arg-type]
    with pytest.raises(PermissionDenied):
        await collect(creating)


async def test_a_deadline_or_a_server_fault_is_retried() -> None:
    script: list[dict[str, grpc.StatusCode] | Exception] = [
        error_of(grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
        error_of(grpc.StatusCode.UNKNOWN, "boom"),
        error_of(grpc.StatusCode.CANCELLED, "shutting down"),
        {},
    ]
    creating = BatchCreate(FakeClient(script), [("a", spec())], timeout_s=10)  # type: ignore[arg-type]
    assert await collect(creating) == [("a", "id-a")]
    assert creating.retried == 3


async def test_past_the_deadline_it_gives_up() -> None:
    client = FakeClient([{"a": UNAVAILABLE}])
    creating = BatchCreate(client, [("a", spec())], timeout_s=0)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match="1 creates still unavailable"):
        await collect(creating)
