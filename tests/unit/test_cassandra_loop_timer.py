"""The driver's request timers on the event loop (loop_connection.LoopTimer): started
and cancelled from the loop's thread or from another thread, a cancelled timer never
calls back."""

from __future__ import annotations

import asyncio
import threading
import time

from clockwork_svc.storage.cassandra.loop_connection import LoopConnection, bound_to


def _owner() -> type[LoopConnection]:
    return bound_to(asyncio.get_running_loop())


async def test_a_timer_started_on_the_loop_calls_back_once_when_due() -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    _owner().create_timer(0.05, lambda: calls.append(loop.time() - started))
    await asyncio.sleep(0.2)
    assert len(calls) == 1 and calls[0] >= 0.05


async def test_a_timer_cancelled_on_the_loop_never_calls_back() -> None:
    calls: list[int] = []
    timer = _owner().create_timer(0.05, lambda: calls.append(1))
    timer.cancel()
    await asyncio.sleep(0.2)
    assert calls == []


async def test_a_timer_started_in_another_thread_runs_on_the_loop() -> None:
    owner = _owner()
    ran_on: list[int] = []
    await asyncio.to_thread(owner.create_timer, 0.01, lambda: ran_on.append(threading.get_ident()))
    await asyncio.sleep(0.2)
    assert ran_on == [threading.get_ident()]


async def test_a_timer_cancelled_from_another_thread_never_calls_back() -> None:
    """Whether the cancel arrives before the loop has started the timer or after."""
    owner = _owner()
    calls: list[int] = []

    def start_and_cancel_at_once() -> None:
        owner.create_timer(0.05, lambda: calls.append(1)).cancel()

    await asyncio.to_thread(start_and_cancel_at_once)
    started = await asyncio.to_thread(owner.create_timer, 0.1, lambda: calls.append(2))
    await asyncio.sleep(0.02)  # the loop has started it by now
    await asyncio.to_thread(started.cancel)
    await asyncio.sleep(0.3)
    assert calls == []


async def test_a_cancel_that_races_the_due_time_wins() -> None:
    """Cancelled after the loop scheduled the callback but before it ran: not called."""
    owner = _owner()
    calls: list[int] = []
    timer = owner.create_timer(0.0, lambda: calls.append(1))
    time.sleep(0.01)  # noqa: ASYNC251 (the loop held: due, and not run yet)
    cancelling = threading.Thread(target=timer.cancel)
    cancelling.start()
    cancelling.join()
    await asyncio.sleep(0.05)
    assert calls == []


def test_a_timer_for_a_closed_loop_is_inert() -> None:
    """A request made after its cluster's loop has closed (at exit) starts no timer."""
    loop = asyncio.new_event_loop()

    async def bind() -> type[LoopConnection]:
        return bound_to(loop)

    owner = loop.run_until_complete(bind())
    loop.close()
    calls: list[int] = []
    timer = owner.create_timer(0.0, lambda: calls.append(1))
    timer.cancel()
    assert calls == []
