"""An in-memory timer queue: prefetched firings wait here until their due time.

One heap per worker rather than one timer per firing: a burst of 100k firings due
in the same second costs one wake-up, not 100k call_at handles.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

from clockwork_svc.domain.load import DueCounter

T = TypeVar("T")


class DueQueue(Generic[T]):
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._heap: list[tuple[int, int, T]] = []
        self._counter = itertools.count()
        self._changed = asyncio.Event()
        self._due = DueCounter()

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def counter(self) -> DueCounter:
        """How many queued items fall due by when (for load reports)."""
        return self._due

    def first_due(self) -> int | None:
        """The earliest queued item's due time (None: the queue is empty)."""
        return self._heap[0][0] if self._heap else None

    def pop_if_before(self, due_ms: int) -> tuple[int, T] | None:
        """The first queued item if it falls due before `due_ms` (None otherwise)."""
        if not self._heap or self._heap[0][0] >= due_ms:
            return None
        return self._pop_first()

    def _pop_first(self) -> tuple[int, T]:
        due_ms, _, item = heapq.heappop(self._heap)
        self._due.remove(due_ms)
        return due_ms, item

    def push(self, due_ms: int, item: T) -> None:
        earliest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (due_ms, next(self._counter), item))
        self._due.add(due_ms)
        if earliest is None or due_ms < earliest:
            self._changed.set()

    async def pop_due(self, max_items: int) -> list[tuple[int, T]]:
        """Wait until at least one item is due; return up to `max_items` due items."""
        while True:
            now = self._now_ms()
            if self._heap and self._heap[0][0] <= now:
                due: list[tuple[int, T]] = []
                while self._heap and self._heap[0][0] <= now and len(due) < max_items:
                    due.append(self._pop_first())
                return due
            self._changed.clear()
            timeout = (self._heap[0][0] - now) / 1000 if self._heap else None
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
