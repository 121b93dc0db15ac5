"""The cyclic garbage collector's policy for a long-running api or worker process.

CPython's cyclic collector stops the whole process while it runs, and a full
(oldest generation) collection walks every tracked object. A worker holds ~75k
objects from its imports and more from the Cassandra driver's schema metadata, all
of which live as long as the process: measured under `bench.fire`, full collections
paused the event loop 100-212 ms, the largest part of the firing lag's tail.

`freeze_startup_heap()`, once the process is up (imports done, store connected),
exempts everything allocated so far from future collections (`gc.freeze`). At a
fixed 250 firings/s (one worker, 64 shards) lag p99 went from 249-395 ms to
106-116 ms. The collection thresholds stay CPython's defaults: raising the youngest
generation's (5,000 or 50,000 instead of 700) made its collections rarer but
longer (up to 134 ms each) and the tail no better.

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


def freeze_startup_heap() -> int:
    """Collect once, then exempt every surviving object from future collections;
    returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("gc: %d start-up objects frozen (exempt from collections)", frozen)
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
