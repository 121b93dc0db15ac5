"""The Cassandra bridge's hand-off of results from the driver's threads to the loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest
from cassandra import OperationTimedOut

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge


def _produce_while_the_loop_waits(
    handoff: bridge.Handoff, futures: list[asyncio.Future[bridge.Page]]
) -> None:
    """Put every outcome from another thread while the loop thread is blocked (joining
    it), as a burst of responses read by the driver's I/O thread arrives."""

    def produce() -> None:
        for i, future in enumerate(futures):
            outcome = bridge.Page([{"i": i}], None) if i % 2 else OperationTimedOut("slow")
            handoff.put(future, outcome)

    thread = threading.Thread(target=produce)
    thread.start()
    thread.join()


async def test_a_burst_settles_every_future_with_one_wakeup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    wakeups = 0
    real = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    handoff = bridge.Handoff(loop)
    for burst in (1, 2):
        futures = [loop.create_future() for _ in range(500)]
        _produce_while_the_loop_waits(handoff, futures)
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
        for i, outcome in enumerate(outcomes):
            if i % 2:
                assert outcome == bridge.Page([{"i": i}], None)
            else:
                # Driver errors are translated on the loop thread, cause kept.
                assert isinstance(outcome, StoreUnavailable)
                assert isinstance(outcome.__cause__, OperationTimedOut)
        # One wake-up per burst: the drain clears its mark, so the next burst wakes again.
        assert wakeups == burst


async def test_a_cancelled_waiter_is_skipped() -> None:
    loop = asyncio.get_running_loop()
    handoff = bridge.Handoff(loop)
    cancelled, waiting = loop.create_future(), loop.create_future()
    cancelled.cancel()
    _produce_while_the_loop_waits(handoff, [cancelled, waiting])
    assert isinstance(await asyncio.wait_for(waiting, 5), bridge.Page)


def test_the_registry_does_not_keep_a_loop_alive() -> None:
    loop = asyncio.new_event_loop()
    handoff = bridge.handoff_for(loop)
    assert bridge.handoff_for(loop) is handoff
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None
    # A late response for a loop that is gone is dropped, not raised on the driver thread.
    other = asyncio.new_event_loop()
    try:
        handoff.put(other.create_future(), bridge.Page([], None))
    finally:
        other.close()
