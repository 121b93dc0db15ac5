from __future__ import annotations

from dataclasses import dataclass

from clockwork_svc.domain.model import Firing, Outcome
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
