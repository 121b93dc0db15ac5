"""The cyclic garbage collector's policy for a long-running api or worker process.

CPython's cyclic collector stops the whole process while it runs, and a full
(oldest generation) collection walks every tracked object. A worker holds ~75k
objects from its imports and more from the Cassandra driver's schema metadata, all
of which live as long as the process: measured under `bench.fire`, full collections
paused the event loop 100-212 ms, the largest part of the firing lag's tail.

`freeze_startup_heap()`, once the process is up (imports done, store connected),
exempts everything allocated so far from future collections (`gc.freeze`). At a
fixed 250 firings/s (one worker, 64 shards) lag p99 is 106-116 ms frozen against
249-395 ms unfrozen.

The youngest generation is collected every `YOUNG_THRESHOLD` allocations, not
CPython's 700: most of a firing's objects (requests, futures, rows) die before
then, so each firing costs the collector less. Measured under `bench.fire` (one
worker, three alternating pairs, the same hour), against 700: 1.2-1.3 s of
collection per run instead of 2.0-2.3 s (no full collections instead of 13-14), a
saturating rate ~8 % higher (1,354-1,410 per s against 1,207-1,369), and the same
lag p99 at a fixed 650/s (13-36 ms against 16-25 ms). Each young collection takes
longer: 6-16 ms on average under that load, ~4.5 ms at 100 firings/s, against
under 1 ms at 700. At 50,000 they reach 134 ms, with no better tail.

The threshold trades throughput for tail lag, so it is a setting
(`--gc-young-threshold`). On the 2-core benchmark machine (one worker, alternating
runs; docs/benchmarks.md, "Settings compared"), at 100 firings/s a young collection
takes ~0.45 ms at 700, ~1 ms at 2,000 and ~4.5 ms at 10,000, and 2,000 gives a max
lag of 5-6 ms against 6-12 ms at 10,000. At 1,100/s and saturated the difference is
within noise (one set of runs favours 2,000 by a third on p99 at ~6 % of
throughput, another favours 10,000). The default keeps throughput.

A worker also collects between its sends (`collect_when_idle`): when it has nothing
to send for the next `IDLE_QUIET_MS` and the young generation holds `IDLE_THRESHOLD`
allocations (`--gc-idle-threshold`), it collects then: a pause of ~1-2.5 ms that
falls between sends. At a light or steady rate nearly every collection happens this way
and the young threshold is never reached; a saturated worker has no gaps and
collects at the young threshold as before. At a fixed 100 firings/s on the benchmark
machine, without it 21 of a run's 24 firings more than 5 ms late were due just
before a young collection of 7-33 ms ended. With it the largest lag of a run was
6-16 ms (ten runs) against 11-26 ms (five runs), and the largest lags left had no
collection near them (docs/benchmarks.md, "Settings compared").

It is on by default (`--gc-idle-threshold 1000`; 0 turns it off).

`observe_pauses()` times every collection into `clockwork_gc_pause_seconds`, so a
lag spike can be told apart from a collection (or shown to be one).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 10_000
"""Allocations (net of deallocations) between collections of the youngest generation,
by default (`--gc-young-threshold`)."""

MIN_YOUNG_THRESHOLD = 100
"""Below this the collector would run almost continuously; 0 would switch it off and
let reference cycles accumulate for good."""

MAX_YOUNG_THRESHOLD = 1_000_000
"""Above this one young collection would stop the process for a large fraction of a
second (~0.45 ms per 1,000 allocations measured on a slow core)."""


IDLE_THRESHOLD = 1_000
"""The default of `--gc-idle-threshold` (the measured setting): a worker with nothing
to send for `IDLE_QUIET_MS` collects as soon as its young generation holds this many
allocations."""

IDLE_QUIET_MS = 4
"""The quiet time an idle collection needs: at `IDLE_THRESHOLD` a young collection
takes ~0.5-1 ms on the benchmark machine's cores."""

IDLE_CHECK_S = 0.05
"""How often the idle collector looks while the young generation is under its
threshold or the worker is behind (20 looks a second cost ~0.2 % of a core)."""


def collect_if_idle(quiet_ms: int | None, threshold: int) -> int | None:
    """Collect now if nothing is due for `IDLE_QUIET_MS` (`quiet_ms`: how long until
    the next send; None: nothing queued) and the young generation holds at least
    `threshold` allocations. Collects the oldest generation due, by CPython's own rule
    (a generation is due when more collections of the one below it ran than its
    threshold). Returns the generation collected, or None."""
    if quiet_ms is not None and quiet_ms < IDLE_QUIET_MS:
        return None
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if counts[0] < threshold:
        return None
    generation = next((g for g in (2, 1) if counts[g] > thresholds[g]), 0)
    gc.collect(generation)
    return generation


def next_look_s(quiet_ms: int | None, threshold: int, check_s: float = IDLE_CHECK_S) -> float:
    """How long the idle collector waits before it looks again, having not collected:
    just past the send due within `IDLE_QUIET_MS` if one is (the gap after it may be
    long enough), otherwise `check_s`."""
    if gc.get_count()[0] < threshold or quiet_ms is None or quiet_ms < 0:
        return check_s
    return min(check_s, (quiet_ms + 1) / 1000)


async def collect_when_idle(
    quiet_ms: Callable[[], int | None], threshold: int, check_s: float = IDLE_CHECK_S
) -> None:
    """Run `collect_if_idle` until cancelled: every `check_s` while there is nothing
    to collect, and just after each send once there is. The automatic collections
    (at the young threshold) still run whenever the process is too busy for these."""
    while True:
        quiet = quiet_ms()
        if collect_if_idle(quiet, threshold) is None:
            await asyncio.sleep(next_look_s(quiet, threshold, check_s))
        else:
            await asyncio.sleep(check_s)


def freeze_startup_heap(young_threshold: int = YOUNG_THRESHOLD) -> int:
    """Collect once, exempt every surviving object from future collections and set
    the young generation's threshold; returns how many objects were frozen."""
    if (
        not isinstance(young_threshold, int)
        or isinstance(young_threshold, bool)
        or not MIN_YOUNG_THRESHOLD <= young_threshold <= MAX_YOUNG_THRESHOLD
    ):
        raise ValueError(
            f"young_threshold must be an integer from {MIN_YOUNG_THRESHOLD} to "
            f"{MAX_YOUNG_THRESHOLD}, got {young_threshold!r}"
        )
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
    frozen = gc.get_freeze_count()
    log.info(
        "gc: %d start-up objects frozen (exempt from collections); young generation "
        "collected every %d allocations",
        frozen,
        gc.get_threshold()[0],
    )
    return frozen


def observe_pauses(observe: Callable[[int, float], None]) -> Callable[[], None]:
    """Time each collection: `observe(generation, seconds)` after it; returns the
    function that stops it."""
    started = 0.0

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            observe(info["generation"], time.perf_counter() - started)

    gc.callbacks.append(on_gc)
    return lambda: gc.callbacks.remove(on_gc)
