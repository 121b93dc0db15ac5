"""What the schedule-read and write batchers share: requests issued within one
event-loop turn are collected, then sent together when the turn ends, and the
requests in flight are tracked so that none is dropped (or left unawaited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class EndOfTurn:
    def __init__(self, flush: Callable[[], None], task_name: str) -> None:
        """`flush` sends whatever its owner has collected; `task_name` names the sends."""
        self._flush = flush
        self._task_name = task_name
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()

    def flush_soon(self) -> None:
        """Call `flush` once when the current event-loop turn ends (however many
        requests ask for it within the turn)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

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
