"""Loaded (through PYTHONPATH) only by the worker the clock-jump test runs under
libfaketime, to undo one defect of the tool, not of Clockwork.

libfaketime 0.9.10 (Debian's) with the monotonic clock left real rewrites the
absolute deadline of `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)` as if it
were a wall-clock time, and the kernel refuses it (EINVAL;
github.com/wolfcw/libfaketime/issues/426). Python 3.11's `time.sleep` makes exactly
that call, so in the faked process every `time.sleep` raised OSError and killed the
thread that made it: among them the Cassandra driver's scheduler thread, which
reconnects to nodes and runs the driver's other timed tasks. A host whose clock
steps has no such fault, so here `time.sleep` waits in `select` (a relative
timeout, which libfaketime passes through) on the real monotonic clock.
"""

from __future__ import annotations

import select
import time
from typing import SupportsIndex


def _sleep(seconds: float | SupportsIndex) -> None:
    length = float(seconds)
    if length < 0:
        raise ValueError("sleep length must be non-negative")
    end = time.monotonic() + length
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
