"""The worker's timer queue: items come out in due order once due, and its count of
what falls due (for load reports) follows every push and pop."""

from __future__ import annotations

from clockwork_svc.worker.due_queue import DueQueue


async def test_items_come_out_due_in_order_and_the_counts_follow() -> None:
    now = [10_000]
    queue: DueQueue[str] = DueQueue(lambda: now[0])
    for due_ms, item in ((12_000, "later"), (9_000, "late"), (10_000, "now"), (5_000, "old")):
        queue.push(due_ms, item)
    assert queue.counter.counts(20_000, 9_500) == (4, 2)
    assert await queue.pop_due(10) == [(5_000, "old"), (9_000, "late"), (10_000, "now")]
    assert len(queue) == 1
    assert queue.counter.counts(20_000, 20_000) == (1, 1)
    now[0] = 12_000
    assert await queue.pop_due(10) == [(12_000, "later")]
    assert queue.counter.counts(20_000, 20_000) == (0, 0)


async def test_pop_due_takes_at_most_max_items() -> None:
    queue: DueQueue[int] = DueQueue(lambda: 1_000)
    for i in range(5):
        queue.push(i, i)
    assert [item for _, item in await queue.pop_due(2)] == [0, 1]
    assert queue.counter.counts(1_000, 1_000) == (3, 3)


def test_pop_if_before_takes_only_an_item_due_earlier() -> None:
    queue: DueQueue[str] = DueQueue(lambda: 1_000)
    queue.push(700, "put back")
    queue.push(900, "next")
    assert queue.pop_if_before(700) is None
    assert queue.pop_if_before(800) == (700, "put back")
    assert queue.pop_if_before(800) is None
    assert queue.counter.counts(1_000, 1_000) == (1, 1)
