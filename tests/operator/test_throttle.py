"""The operator's pacing of Clockwork API work: a rate with a one-second burst, a
concurrency bound, and best-effort turns that never wait."""

from __future__ import annotations

import asyncio

import pytest

from clockwork_operator.throttle import ApiThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_turns_beyond_the_burst_wait_their_own_slot_at_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    throttle = ApiThrottle(10, 100, monotonic=Clock())
    for _ in range(13):
        async with throttle.turn():
            pass
    # A burst of 10 at once, then one every 0.1 s, each caller its own slot.
    assert waits == pytest.approx([0.1, 0.2, 0.3])


async def test_at_most_concurrency_turns_run_at_once() -> None:
    throttle = ApiThrottle(1000, 2)
    running = peak = 0

    async def work() -> None:
        nonlocal running, peak
        async with throttle.turn():
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(work() for _ in range(10)))
    assert peak == 2


async def test_a_best_effort_turn_never_waits() -> None:
    clock = Clock()
    throttle = ApiThrottle(2, 5, monotonic=clock)
    taken = []
    for _ in range(3):
        async with throttle.turn_if_free() as free:
            taken.append(free)
    assert taken == [True, True, False]  # the burst of 2 is spent; nothing is borrowed
    clock.now += 0.5
    async with throttle.turn_if_free() as free:
        assert free


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        ApiThrottle(0, 1)
    with pytest.raises(ValueError, match="concurrency"):
        ApiThrottle(1, 0)
