"""e2e.workload.BatchCreate: a batch create is sent until every entry is acknowledged,
retrying with the same keys, and anything else fails loudly. The client is a fake:
this is the retry logic alone (the api-restart and Cassandra-restart nemeses run it
against real servers)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from e2e.workload import BatchCreate

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]


def spec() -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(1_700_000_000_000), HttpTarget("http://x/"))


class FakeClient:
    """Answers each call from a script: a list of per-key codes, or an exception."""

    def __init__(self, script: list[dict[str, int] | Exception]) -> None:
        self.script = script
        self.calls: list[list[str]] = []

    async def create_many(self, entries: Sequence[tuple[str, ScheduleSpec]]) -> Any:
        self.calls.append([key for key, _ in entries])
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        results = [
            SimpleNamespace(
                code=step.get(key, 0),
                message=f"code {step.get(key, 0)}",
                response=SimpleNamespace(schedule=SimpleNamespace(id=f"id-{key}")),
            )
            for key, _ in entries
        ]
        return SimpleNamespace(results=results)


def unavailable_call() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "api restarting"
    )


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
    denied = grpc.aio.AioRpcError(
        grpc.StatusCode.PERMISSION_DENIED, grpc.aio.Metadata(), grpc.aio.Metadata(), "no"
    )
    creating = BatchCreate(FakeClient([denied]), [("a", spec())], timeout_s=10)  # type: ignore[arg-type]
    with pytest.raises(grpc.aio.AioRpcError):
        await collect(creating)


async def test_past_the_deadline_it_gives_up() -> None:
    client = FakeClient([{"a": UNAVAILABLE}])
    creating = BatchCreate(client, [("a", spec())], timeout_s=0)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match="1 creates still unavailable"):
        await collect(creating)
