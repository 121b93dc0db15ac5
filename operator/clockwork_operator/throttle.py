"""Paces the operator's work against the Clockwork API: at most `rate_per_s`
reconciles a second (a token bucket, with a burst of one second's worth) and at most
`concurrency` at once, so that ten thousand resources applied together reach
Clockwork as a steady stream rather than a flood. Status refreshes are best-effort:
one that finds no token or no free slot is skipped until its next tick."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from clockwork_svc.domain.rate_limit import TokenBucket


class ApiThrottle:
    def __init__(
        self,
        rate_per_s: float,
        concurrency: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s <= 0 or concurrency < 1:
            raise ValueError("the API rate must be above 0 and the concurrency at least 1")
        self._bucket = TokenBucket(rate_per_s, max(1.0, rate_per_s))
        self._slots = asyncio.Semaphore(concurrency)
        self._monotonic = monotonic

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for a free slot, then for a token (each caller its own, in order). The
        token is taken last, just before the call: calls held up behind slow ones do
        not all go out together once those finish."""
        async with self._slots:
            delay_s = self._bucket.reserve(self._monotonic())
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            yield

    @contextlib.asynccontextmanager
    async def turn_if_free(self) -> AsyncIterator[bool]:
        """A turn now if a token and a slot are free (yields True), else yields False."""
        if self._slots.locked() or not self._bucket.try_take(self._monotonic()):
            yield False
            return
        async with self._slots:
            yield True
