"""Admission control: the api handles at most `limit` calls at once and refuses the
rest at once with UNAVAILABLE and a retry hint, instead of queueing without bound.

Every v1 call is idempotent and a refused call has done nothing (it is refused before
authentication, decoding or any store access), so a client retries it safely: the
documented retry policy retries UNAVAILABLE, and the hint travels as
`grpc-retry-pushback-ms`, which gRPC's built-in retries honour in place of their own
backoff. The hint is the time the calls refused over the last second would take at
the rate calls finished (at least an admitted call's moving-average duration, which
grows when the store slows), jittered (0.5x-1.5x) so refused callers do not come back
together, at most MAX_HINT_MS. Health checks and reflection are never refused.

It is the first step of every call (call_pipeline.py): a refused call costs a counter
check and a status.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, NoReturn

import grpc

PUSHBACK_METADATA = "grpc-retry-pushback-ms"
MIN_HINT_MS = 20
MAX_HINT_MS = 5_000
INITIAL_CALL_MS = 100.0
SMOOTHING = 0.05


class Admission:
    """Counts the calls being handled and says when one more would be too many; pure
    logic, with the clock and the jitter injected."""

    def __init__(
        self,
        limit: int,
        monotonic: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if limit < 1:
            raise ValueError(f"max in-flight calls must be at least 1, not {limit}")
        self.limit = limit
        self.in_flight = 0
        self._monotonic = monotonic
        self._jitter = jitter
        # Moving average of an admitted call's duration: about when a slot frees up.
        self._call_ms = INITIAL_CALL_MS
        # Calls finished and refused in the current one-second window, and in the last.
        self._window_start = monotonic()
        self._counts = [0, 0]
        self._last_counts = (0, 0)

    @property
    def full(self) -> bool:
        return self.in_flight >= self.limit

    def try_enter(self) -> float | None:
        """Admits a call: returns its start time, to pass to `leave`; None if full."""
        if self.full:
            return None
        self.in_flight += 1
        return self._monotonic()

    def leave(self, started: float) -> None:
        self.in_flight -= 1
        now = self._monotonic()
        self._call_ms += SMOOTHING * ((now - started) * 1000 - self._call_ms)
        self._roll(now)
        self._counts[0] += 1

    def refused(self) -> int:
        """Counts a refusal; returns how long the refused caller should wait, in ms."""
        self._roll(self._monotonic())
        self._counts[1] += 1
        finished, refused = self._last_counts
        # The time the calls refused over the last second would take to serve at the
        # rate calls finished, and at least one call's duration: a bigger burst is
        # told to come back later, so retries do not eat the capacity they wait for.
        backlog_ms = 1000 * refused / max(finished, 1)
        hint = max(self._call_ms, backlog_ms) * (0.5 + self._jitter())
        return int(min(MAX_HINT_MS, max(MIN_HINT_MS, hint)))

    def _roll(self, now: float) -> None:
        elapsed = now - self._window_start
        if elapsed < 1.0:
            return
        self._last_counts = (self._counts[0], self._counts[1]) if elapsed < 2.0 else (0, 0)
        self._counts = [0, 0]
        self._window_start = now


async def refuse(admission: Admission, context: grpc.aio.ServicerContext[Any, Any]) -> NoReturn:
    """Refuse a call UNAVAILABLE, with the retry hint in its trailing metadata."""
    hint = admission.refused()
    await context.abort(
        grpc.StatusCode.UNAVAILABLE,
        f"server overloaded: {admission.limit} calls in flight; retry after {hint} ms",
        trailing_metadata=((PUSHBACK_METADATA, str(hint)),),
    )
    raise AssertionError("unreachable: abort raises")
