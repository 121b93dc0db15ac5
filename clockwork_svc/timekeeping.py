"""Cluster time: one reference clock for every process of a cluster.

A firing is due when the *cluster's* clock reaches its time, not when some host's
wall clock does. Every api and worker process of a Cassandra-backed cluster reads the
time from `StoreClock`: the store's own clock (Cassandra's coordinator), sampled over
the network, then advanced by this host's monotonic clock. So:

- a step of a host's wall clock (an operator's `date -s`, a VM restored from a
  snapshot, NTP stepping after a long suspend) moves nothing: the monotonic clock
  does not step, and the next sample agrees with the last;
- the api's "now" (below which it never writes a firing) and the workers' "now"
  (behind which their sweeps and cursors stop looking) come from one clock, so a
  worker whose wall clock runs ahead cannot skip a firing the api has just written;
- the Cassandra write timestamps of every process come from it as well
  (`WriteTimestamps`): a write made after another never carries an older timestamp
  because its host's clock is behind, which would make Cassandra discard it.

The offset is re-sampled every `resync_s`. A reading of the store's clock only says
that the store's time was `reading` at *some* instant between sending the request
and receiving the answer, so each reading bounds the offset to an interval as wide
as its round trip, and a few readings' intervals intersect. The estimate moves only
as far as needed to enter that interval (to its nearest edge): with clocks that
agree (NTP, or one machine) the estimate stays exact however slow the round trip,
and a host whose clock is off moves to within one round trip of the store's.

The round trip's midpoint (NTP's estimate for symmetric paths) is not used: on a
busy worker the request can wait hundreds of milliseconds on the client before it
is sent, the reading lands near the end of the round trip, and a midpoint estimate
runs ahead (280 ms measured with `bench.fire`), firing everything that much early
until the next sample. Pure logic: the sampling call is injected.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from clockwork_svc.errors import StoreUnavailable

log = logging.getLogger(__name__)

SKEW_WARNING_MS = 1_000
"""A host clock further than this from cluster time is logged (Clockwork fires by
cluster time, but everything else on that host reads its own clock)."""


class StoreClock:
    """A `clockwork_svc.abc.Clock` anchored on a reference clock (see module docs).

    Before the first successful `sync`, it is the local wall clock."""

    def __init__(
        self,
        *,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._wall_ns = wall_ns
        self._monotonic_ns = monotonic_ns
        # cluster time (ns) = monotonic (ns) + offset
        self._offset_ns = wall_ns() - monotonic_ns()
        self.synced = False
        self.uncertainty_ms = float("inf")
        """Width of the interval the last sync allowed for the offset (ms)."""

    def now_ms(self) -> int:
        return (self._monotonic_ns() + self._offset_ns) // 1_000_000

    def now_us(self) -> int:
        return (self._monotonic_ns() + self._offset_ns) // 1_000

    def monotonic(self) -> float:
        return self._monotonic_ns() / 1e9

    def host_skew_ms(self) -> int:
        """This host's wall clock minus cluster time (positive: the host runs ahead)."""
        return (self._wall_ns() - self._monotonic_ns() - self._offset_ns) // 1_000_000

    async def sync(self, reference_ms: Callable[[], Awaitable[int]], samples: int = 3) -> None:
        """Re-anchor on `reference_ms()` (the reference clock's time, in ms): the
        offset moves to the nearest point of the interval that `samples` readings
        allow (see module docs). Errors from `reference_ms` propagate."""
        intervals: list[tuple[int, int, int]] = []  # (round trip, lowest, highest offset)
        for _ in range(samples):
            sent = self._monotonic_ns()
            reference = await reference_ms()
            received = self._monotonic_ns()
            # The reading (ms, rounded down) was taken at some instant in [sent, received].
            lowest = reference * 1_000_000 - received
            highest = (reference + 1) * 1_000_000 - sent
            intervals.append((received - sent, lowest, highest))
        assert intervals, "samples must be >= 1"
        lowest = max(i[1] for i in intervals)
        highest = min(i[2] for i in intervals)
        if lowest > highest:
            # Readings that contradict each other (the store's clock stepped while
            # sampling): the one with the shortest round trip alone.
            _, lowest, highest = min(intervals)
        offset = min(max(self._offset_ns, lowest), highest)
        moved_ms = (offset - self._offset_ns) / 1e6
        if self.synced and abs(moved_ms) >= SKEW_WARNING_MS:
            log.warning("cluster time: the store's clock moved by %+.0f ms", moved_ms)
        self._offset_ns = offset
        self.uncertainty_ms = (highest - lowest) / 1e6
        first = not self.synced
        self.synced = True
        skew = self.host_skew_ms()
        if abs(skew) >= SKEW_WARNING_MS:
            log.warning(
                "this host's wall clock is %+d ms off the cluster's (the store's) clock; "
                "Clockwork uses cluster time, other software on this host does not",
                skew,
            )
        elif first:
            log.info(
                "cluster time: host clock within %+d ms of the store's (measured to %.1f ms)",
                skew,
                self.uncertainty_ms,
            )

    async def keep_synced(
        self, reference_ms: Callable[[], Awaitable[int]], resync_s: float = 30.0
    ) -> None:
        """Re-sync forever, every `resync_s`; a failed sample keeps the last anchor
        (the monotonic clock carries it) and is retried at the next interval."""
        while True:
            await asyncio.sleep(resync_s)
            try:
                await self.sync(reference_ms)
            except StoreUnavailable as exc:
                log.warning("cluster time: cannot sample the store's clock: %s", exc)
            except Exception:  # nothing may stop the re-syncing
                log.exception("cluster time: sampling the store's clock failed")


class WriteTimestamps:
    """Write timestamps (microseconds) for the Cassandra driver: cluster time, strictly
    increasing within this process (two writes of one process keep their order even
    within one microsecond). Called from the driver's threads, hence the lock."""

    def __init__(self, clock: StoreClock) -> None:
        self._clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        now = self._clock.now_us()
        with self._lock:
            self._last = now if now > self._last else self._last + 1
            return self._last
