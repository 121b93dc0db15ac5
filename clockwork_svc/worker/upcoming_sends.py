"""The due times of the firings a worker has taken from its due queue and not yet
sent: the earliest says how long the worker has nothing to send (`Worker.quiet_ms`),
which is when it can afford to pause (gc_policy.collect_when_idle)."""

from __future__ import annotations

import heapq
from collections import Counter


class UpcomingSends:
    """A multiset of due times (ms) with its minimum; removal is lazy."""

    def __init__(self) -> None:
        self._heap: list[int] = []
        self._removed: Counter[int] = Counter()

    def __len__(self) -> int:
        return len(self._heap) - self._removed.total()

    def add(self, due_ms: int) -> None:
        heapq.heappush(self._heap, due_ms)

    def remove(self, due_ms: int) -> None:
        """Remove one occurrence of `due_ms`, which must have been added."""
        self._removed[due_ms] += 1
        self._prune()

    def first(self) -> int | None:
        """The earliest due time held (None: none)."""
        self._prune()
        return self._heap[0] if self._heap else None

    def _prune(self) -> None:
        heap, removed = self._heap, self._removed
        while heap and removed[heap[0]]:
            due_ms = heapq.heappop(heap)
            removed[due_ms] -= 1
            if not removed[due_ms]:
                del removed[due_ms]
