"""What the schedule-read and write batchers share: requests issued within one
event-loop turn (or, with a linger, within a few milliseconds) are collected, then
sent together, and the requests in flight are tracked so that none is dropped (or
left unawaited).

The linger trades latency for requests: a worker dispatching a few hundred firings a
second issues its per-firing writes a few per turn, so with no linger each batch is
small, and both the client and Cassandra pay a request's fixed cost per few rows.
Waiting `linger_s` after the first request of a batch gathers the next turns' too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class EndOfTurn:
    def __init__(self, flush: Callable[[], None], task_name: str, linger_s: float = 0.0) -> None:
        """`flush` sends whatever its owner has collected; `task_name` names the sends;
        `linger_s`: how long after the first request the batch is sent (0: when the
        current event-loop turn ends)."""
        if linger_s < 0:
            raise ValueError("linger_s must be >= 0")
        self._flush = flush
        self._task_name = task_name
        self._linger_s = linger_s
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()

    def flush_soon(self) -> None:
        """Call `flush` once when the current event-loop turn ends, or `linger_s` from
        now (however many requests ask for it meanwhile)."""
        if not self._scheduled:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            if self._linger_s:
                loop.call_later(self._linger_s, self._run)
            else:
                loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        self._flush()

    def send(self, request: Coroutine[Any, Any, None]) -> None:
        """Run one request (a batch) in the background, tracked until it ends."""
        task = asyncio.create_task(request, name=self._task_name)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def drain(self) -> None:
        """Wait for every request in flight (their own errors go to their callers)."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
