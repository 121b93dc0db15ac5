from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from clockwork_svc.domain.model import Firing, Outcome
from clockwork_svc.domain.planning import sequence_key
from clockwork_svc.domain.spec import OverlapPolicy
from clockwork_svc.worker.sequencer import OrderingSequencer


@dataclass(frozen=True)
class Item:
    firing: Firing


class Blocks:
    def __init__(self, stored: str = "") -> None:
        self.stored = stored

    async def get_ordering_block(self, tenant: str, ordering_key: str) -> str:
        return self.stored


def item(occurrence: int, attempt: int = 1, key: str = "o") -> Item:
    return Item(
        Firing(
            shard=1,
            fire_at_ms=occurrence,
            firing_id=f"f{occurrence}-{attempt}",
            tenant="t",
            schedule_key="k",
            schedule_id="s",
            version=1,
            seq=0,
            occurrence_ms=occurrence,
            attempt=attempt,
            delivery_id=f"d{occurrence}",
            ordering_key=key,
        )
    )


async def test_one_in_flight_per_key_and_release_in_order() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    first, second, third = item(1), item(2), item(3)
    assert await seq.admit(first)
    assert not await seq.admit(third)
    assert not await seq.admit(second)
    assert await seq.admit(item(5, key="other"))  # another key is independent
    assert seq.completed(first, Outcome.SUCCEEDED) == [second]
    assert await seq.admit(second)
    assert seq.completed(second, Outcome.FAILED) == [third]


async def test_a_pending_retry_blocks_the_key_until_it_resolves() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    first, second = item(1), item(2)
    assert await seq.admit(first)
    assert seq.completed(first, Outcome.RETRYING) == []
    assert not await seq.admit(second)  # due before the retry, but must wait
    retry = item(1, attempt=2)
    assert await seq.admit(retry)
    assert seq.completed(retry, Outcome.SUCCEEDED) == [second]


async def test_the_stored_block_survives_a_takeover() -> None:
    # A new owner: the store says delivery d1 has a retry pending.
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks(stored="d1"))
    second, retry = item(2), item(1, attempt=3)
    assert not await seq.admit(second)
    assert await seq.admit(retry)
    assert seq.completed(retry, Outcome.EXPIRED) == [second]


async def test_a_retry_racing_its_own_completion_is_not_parked() -> None:
    # With a near-zero backoff the retry can be due before the worker has recorded the
    # first attempt's outcome; it belongs to the delivery in flight, so it goes.
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    first, second = item(1), item(2)
    assert await seq.admit(first)
    assert not await seq.admit(second)
    assert await seq.admit(item(1, attempt=2))


async def test_forget_shard_drops_state() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    assert await seq.admit(item(1))
    seq.forget_shard(1)
    assert await seq.admit(item(2))


def overlapping(occurrence: int, policy: OverlapPolicy, attempt: int = 1) -> Item:
    """A firing of schedule k, which has no ordering key but an overlap policy."""
    base = item(occurrence, attempt, key="")
    return Item(dataclasses.replace(base.firing, overlap=policy))


async def test_overlap_skip_skips_while_the_schedule_is_busy_or_blocked() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    first = overlapping(1, OverlapPolicy.SKIP)
    assert sequence_key(first.firing) == "#k"
    assert await seq.admit(first) is True
    assert await seq.admit(overlapping(2, OverlapPolicy.SKIP)) is None  # in flight
    assert seq.completed(first, Outcome.RETRYING) == []
    assert await seq.admit(overlapping(3, OverlapPolicy.SKIP)) is None  # retry pending
    retry = overlapping(1, OverlapPolicy.SKIP, attempt=2)
    assert await seq.admit(retry) is True  # its own retry goes
    assert seq.completed(retry, Outcome.SUCCEEDED) == []
    assert await seq.admit(overlapping(4, OverlapPolicy.SKIP)) is True


async def test_overlap_buffer_one_waits_for_the_running_delivery() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks())
    first, second = (
        overlapping(1, OverlapPolicy.BUFFER_ONE),
        overlapping(2, OverlapPolicy.BUFFER_ONE),
    )
    assert await seq.admit(first) is True
    assert await seq.admit(second) is False
    assert seq.completed(first, Outcome.SUCCEEDED) == [second]


async def test_a_stored_block_skips_after_a_takeover() -> None:
    seq: OrderingSequencer[Item] = OrderingSequencer(Blocks(stored="d1"))
    assert await seq.admit(overlapping(2, OverlapPolicy.SKIP)) is None
    assert await seq.admit(overlapping(1, OverlapPolicy.SKIP, attempt=2)) is True


def test_allow_all_is_not_sequenced() -> None:
    assert sequence_key(overlapping(1, OverlapPolicy.ALLOW_ALL).firing) == ""
    assert sequence_key(item(1, key="o").firing) == "o"
