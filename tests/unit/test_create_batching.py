"""Unary creates made together (`CreateBatcher`): each caller gets its own answer, as
alone; one batch per tenant and turn; a failed batch fails each member, a cancelled
caller does not disturb the others. Through a real store: tests/unit/test_create_many.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from clockwork_svc.create_batching import CreateBatcher
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Created, NewSchedule, Schedule, ScheduleState
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.errors import ClockworkError, InvalidArgument, StoreUnavailable


def spec(url: str = "http://127.0.0.1:9/hook", at_ms: int = 4_000_000_000_000) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(at_ms), HttpTarget(url))


class Recorder:
    """A create_all that records its calls and answers from a rule per key."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.fail_with: Exception | None = None
        self.release = asyncio.Event()
        self.release.set()
        self.called = asyncio.Event()

    async def __call__(
        self, tenant: str, requests: Sequence[NewSchedule]
    ) -> list[Created | ClockworkError]:
        self.calls.append((tenant, [r.key for r in requests]))
        self.called.set()
        await self.release.wait()
        if self.fail_with is not None:
            raise self.fail_with
        out: list[Created | ClockworkError] = []
        for key, s in ((r.key, r.spec) for r in requests):
            if key.startswith("bad"):
                out.append(InvalidArgument("key", f"bad key {key!r}"))
            else:
                schedule = Schedule(tenant, key, key, s, ScheduleState.ACTIVE, 1, 0, 0, 0)
                out.append(Created(schedule, True))
        return out


async def test_one_batch_per_tenant_and_turn_each_caller_its_own_answer() -> None:
    recorder = Recorder()
    batcher = CreateBatcher(recorder, max_batch=100)
    results = await asyncio.gather(
        batcher.create("a", NewSchedule("k1", spec())),
        batcher.create("a", NewSchedule("bad1", spec())),
        batcher.create("b", NewSchedule("k2", spec())),
        batcher.create("a", NewSchedule("k3", spec())),
        return_exceptions=True,
    )
    assert sorted(recorder.calls) == [("a", ["k1", "bad1", "k3"]), ("b", ["k2"])]
    assert isinstance(results[0], Created) and results[0].schedule.key == "k1"
    assert isinstance(results[1], InvalidArgument) and "bad1" in str(results[1])
    assert isinstance(results[2], Created) and results[2].schedule.tenant == "b"
    assert isinstance(results[3], Created) and results[3].schedule.key == "k3"


async def test_batches_are_bounded_and_later_turns_make_new_batches() -> None:
    recorder = Recorder()
    batcher = CreateBatcher(recorder, max_batch=3)
    await asyncio.gather(*(batcher.create("a", NewSchedule(f"k{i}", spec())) for i in range(7)))
    assert [len(keys) for _, keys in recorder.calls] == [3, 3, 1]
    await batcher.create("a", NewSchedule("later", spec()))
    assert recorder.calls[-1] == ("a", ["later"])


async def test_a_failed_batch_fails_every_member() -> None:
    recorder = Recorder()
    recorder.fail_with = StoreUnavailable("cassandra: down")
    batcher = CreateBatcher(recorder, max_batch=10)
    results = await asyncio.gather(
        *(batcher.create("a", NewSchedule(f"k{i}", spec())) for i in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreUnavailable) for r in results)


async def test_a_cancelled_caller_leaves_the_others_answered() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher = CreateBatcher(recorder, max_batch=10)
    first = asyncio.create_task(batcher.create("a", NewSchedule("k1", spec())))
    second = asyncio.create_task(batcher.create("a", NewSchedule("k2", spec())))
    await recorder.called.wait()
    first.cancel()
    recorder.release.set()
    assert (await second).schedule.key == "k2"
    with pytest.raises(asyncio.CancelledError):
        await first


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        CreateBatcher(Recorder(), max_batch=0)


async def test_a_caller_cancelled_while_queued_is_not_sent() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher = CreateBatcher(recorder, max_batch=10, max_in_flight=1)
    first = asyncio.create_task(batcher.create("a", NewSchedule("k1", spec())))
    await recorder.called.wait()  # k1's batch is in flight: the next ones queue
    queued = [
        asyncio.create_task(batcher.create("a", NewSchedule(k, spec()))) for k in ("k2", "k3")
    ]
    await asyncio.sleep(0)
    queued[0].cancel()
    recorder.release.set()
    assert (await first).schedule.key == "k1"
    assert (await queued[1]).schedule.key == "k3"
    assert recorder.calls == [("a", ["k1"]), ("a", ["k3"])]


async def test_creates_arriving_during_a_batch_go_out_together_as_the_next() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher = CreateBatcher(recorder, max_batch=10)
    first = asyncio.create_task(batcher.create("a", NewSchedule("k0", spec())))
    await recorder.called.wait()  # k0's batch is in flight
    later = [
        asyncio.create_task(batcher.create("a", NewSchedule(f"k{i}", spec()))) for i in (1, 2, 3)
    ]
    await asyncio.sleep(0)
    assert recorder.calls == [("a", ["k0"])]  # nothing more until k0's batch is answered
    recorder.release.set()
    await asyncio.gather(first, *later)
    assert recorder.calls == [("a", ["k0"]), ("a", ["k1", "k2", "k3"])]


async def test_each_batch_sent_reports_its_size() -> None:
    """What `clockwork_create_batch_creates` observes: one size per batch sent."""
    recorder = Recorder()
    recorder.release.clear()
    sizes: list[int] = []
    batcher = CreateBatcher(recorder, max_batch=2, on_batch=sizes.append)
    first = asyncio.create_task(batcher.create("a", NewSchedule("k0", spec())))
    await recorder.called.wait()
    later = [
        asyncio.create_task(batcher.create("a", NewSchedule(f"k{i}", spec()))) for i in (1, 2, 3)
    ]
    await asyncio.sleep(0)
    recorder.release.set()
    await asyncio.gather(first, *later)
    assert sizes == [1, 2, 1]
