"""The cyclic garbage collector's policy for a long-running api or worker process.

CPython's cyclic collector stops the whole process while it runs, and a full
(oldest generation) collection walks every tracked object. A worker holds ~75k
objects from its imports and more from the Cassandra driver's schema metadata, all
of which live as long as the process: measured under `bench.fire`, full collections
paused the event loop 100-212 ms, the largest part of the firing lag's tail.

`freeze_startup_heap()`, once the process is up (imports done, store connected),
exempts everything allocated so far from future collections (`gc.freeze`). At a
fixed 250 firings/s (one worker, 64 shards) lag p99 went from 249-395 ms to
106-116 ms.

The youngest generation is collected every `YOUNG_THRESHOLD` allocations, not
CPython's 700: most of a firing's objects (requests, futures, rows) die before
then, so each firing costs the collector less. Measured under `bench.fire` (one
worker, three alternating pairs, the same hour): total collection time per run
fell from 2.0-2.3 s to 1.2-1.3 s (no full collections instead of 13-14), the saturating
rate rose 8 % (1,207/1,263/1,369 to 1,354/1,405/1,410 per s), and at a fixed 650/s
the lag's p99 was unchanged (13-36 ms against 16-25 ms). Young collections take
6-16 ms each on average instead of under 1 ms. (An earlier, pre-read-ahead trial of 50,000
made them up to 134 ms long, with no better tail.)

The threshold trades throughput for tail lag, so it is a setting
(`--gc-young-threshold`). Measured on the 2-core benchmark machine (one worker,
alternating runs; docs/benchmarks.md, tenth session): a young collection took ~0.45
ms at 700, ~1 ms at 2,000 and ~4.5 ms at 10,000 (at 100 firings/s); at 100/s, 2,000
gave a max lag of 5-6 ms against 6-12 ms at 10,000. At 1,100/s and saturated the
difference was within noise (one set of runs favoured 2,000 by a third on p99 at
~6 % of throughput, another favoured 10,000). The default keeps throughput.

`observe_pauses()` times every collection into `clockwork_gc_pause_seconds`, so a
lag spike can be told apart from a collection (or shown to be one).
"""

from __future__ import annotations

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
