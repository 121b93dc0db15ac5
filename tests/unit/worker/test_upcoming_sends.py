"""UpcomingSends: the due times a worker has yet to send, and the earliest of them."""

from __future__ import annotations

import random

from clockwork_svc.worker.upcoming_sends import UpcomingSends


def test_the_earliest_is_the_smallest_time_still_held() -> None:
    sends = UpcomingSends()
    assert sends.first() is None and len(sends) == 0
    for due_ms in (30, 10, 20, 10):
        sends.add(due_ms)
    assert sends.first() == 10 and len(sends) == 4
    sends.remove(10)
    assert sends.first() == 10 and len(sends) == 3  # the same time twice: one left
    sends.remove(10)
    assert sends.first() == 20
    sends.remove(30)  # not the earliest: removed all the same
    assert sends.first() == 20 and len(sends) == 1
    sends.remove(20)
    assert sends.first() is None and len(sends) == 0


def test_it_agrees_with_a_plain_list_over_random_changes() -> None:
    rng = random.Random(7)
    sends, model = UpcomingSends(), list[int]()
    for _ in range(5_000):
        if model and rng.random() < 0.5:
            due_ms = model.pop(rng.randrange(len(model)))
            sends.remove(due_ms)
        else:
            due_ms = rng.randrange(50)
            model.append(due_ms)
            sends.add(due_ms)
        assert sends.first() == (min(model) if model else None)
        assert len(sends) == len(model)
