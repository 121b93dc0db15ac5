"""The api and worker processes exempt their start-up heap from the cyclic collector
(clockwork_svc/gc_policy.py). Run in a child process: freezing pytest's own heap
would change every later test."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from clockwork_svc import gc_policy
from clockwork_svc.observability.metrics import Metrics

CHILD = textwrap.dedent(
    """
    import gc
    from clockwork_svc import gc_policy

    startup = [[i] for i in range(20_000)]  # long-lived, like driver metadata
    garbage = []
    garbage.append(garbage)  # a cycle that exists only until the collection
    del garbage
    frozen = gc_policy.freeze_startup_heap()
    assert frozen >= 20_000, frozen
    tracked = gc.get_objects()
    assert not any(o is startup for o in tracked), "start-up objects still collected"
    assert len(tracked) < 5_000, len(tracked)
    later = []
    later.append(later)  # objects made after start-up are still collected
    assert any(o is later for o in gc.get_objects())
    assert gc.get_threshold()[0] == gc_policy.YOUNG_THRESHOLD
    print("frozen", frozen, "tracked", len(tracked))
    """
)


def test_start_up_heap_is_frozen_and_later_objects_are_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("frozen ")


def test_the_young_threshold_is_the_one_given() -> None:
    child = textwrap.dedent(
        """
        import gc
        from clockwork_svc import gc_policy

        for threshold in (100, 2_500, 1_000_000):
            gc_policy.freeze_startup_heap(threshold)
            print(gc.get_threshold()[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100", "2500", "1000000"]


@pytest.mark.parametrize(
    "threshold", [0, gc_policy.MIN_YOUNG_THRESHOLD - 1, gc_policy.MAX_YOUNG_THRESHOLD + 1, True]
)
def test_a_threshold_out_of_range_is_refused_before_anything_changes(threshold: int) -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with pytest.raises(ValueError, match="young_threshold must be an integer from 100 to 1000000"):
        gc_policy.freeze_startup_heap(threshold)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


def _pauses(metrics: Metrics, generation: str) -> float:
    line = f'clockwork_gc_pause_seconds_count{{generation="{generation}"}} '
    counted = [row for row in metrics.render().decode().splitlines() if row.startswith(line)]
    return float(counted[0].split()[-1]) if counted else 0.0


def test_collections_are_timed_into_the_pause_histogram() -> None:
    metrics = Metrics()
    stop = gc_policy.observe_pauses(metrics.gc_paused)
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        stop()
    assert _pauses(metrics, "0") >= 1
    full = _pauses(metrics, "2")
    assert full >= 1
    gc.collect(2)  # after stop(): not counted
    assert _pauses(metrics, "2") == full
