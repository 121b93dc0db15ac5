"""The api and worker processes exempt their start-up heap from the cyclic collector
(clockwork_svc/gc_policy.py). Run in a child process: freezing pytest's own heap
would change every later test."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

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


@pytest.fixture
def manual_collections() -> Iterator[list[int]]:
    """No automatic collection while the test runs (thresholds out of reach); yields
    the generations collected meanwhile, in order."""
    before = gc.get_threshold()
    collected: list[int] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            collected.append(info["generation"])

    gc.set_threshold(1_000_000, 10, 10)
    gc.collect()
    gc.callbacks.append(on_gc)
    try:
        yield collected
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*before)


def _allocate(n: int) -> list[list[int]]:
    return [[i] for i in range(n)]


def test_an_idle_worker_collects_once_the_young_generation_is_past_the_threshold(
    manual_collections: list[int],
) -> None:
    kept = _allocate(500)
    assert gc_policy.collect_if_idle(None, 1_000) is None  # not enough allocations yet
    kept += _allocate(600)
    assert gc_policy.collect_if_idle(None, 1_000) == 0
    assert manual_collections == [0]
    assert gc.get_count()[0] < 100
    kept += _allocate(1_100)
    assert gc_policy.collect_if_idle(gc_policy.IDLE_QUIET_MS, 1_000) == 0
    assert len(kept) == 2_200


def test_a_send_due_soon_or_late_defers_the_collection(manual_collections: list[int]) -> None:
    kept = _allocate(2_000)
    for quiet_ms in (gc_policy.IDLE_QUIET_MS - 1, 0, -50):
        assert gc_policy.collect_if_idle(quiet_ms, 1_000) is None
    assert manual_collections == []
    assert gc.get_count()[0] >= 2_000 and len(kept) == 2_000


def test_an_idle_collection_takes_the_oldest_generation_due(
    manual_collections: list[int],
) -> None:
    gc.set_threshold(1_000_000, 2, 1)
    kept = []
    for expected in (0, 0, 0, 1, 0, 0, 0, 1, 2):
        kept += _allocate(150)
        assert gc_policy.collect_if_idle(None, 100) == expected
    assert manual_collections == [0, 0, 0, 1, 0, 0, 0, 1, 2]


async def test_the_idle_collector_looks_again_and_again_until_cancelled(
    manual_collections: list[int],
) -> None:
    quiet: list[int | None] = [0]  # a send is due now: nothing is collected
    task = asyncio.create_task(gc_policy.collect_when_idle(lambda: quiet[0], 100, check_s=0.001))
    kept = _allocate(500)
    await asyncio.sleep(0.05)
    assert manual_collections == []
    quiet[0] = 1_000
    for _ in range(200):
        await asyncio.sleep(0.005)
        if manual_collections:
            break
    assert manual_collections and manual_collections[0] == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(kept) == 500


def test_the_idle_collector_looks_again_just_after_a_send_due_soon(
    manual_collections: list[int],
) -> None:
    assert gc_policy.next_look_s(2, 1_000_000, check_s=0.05) == 0.05  # nothing to collect
    kept = _allocate(200)
    assert gc_policy.next_look_s(2, 100, check_s=0.05) == 0.003  # just past the send
    assert gc_policy.next_look_s(0, 100, check_s=0.05) == 0.001
    assert gc_policy.next_look_s(-20, 100, check_s=0.05) == 0.05  # behind: no gaps now
    assert gc_policy.next_look_s(None, 100, check_s=0.05) == 0.05
    assert gc_policy.next_look_s(200, 100, check_s=0.05) == 0.05
    assert manual_collections == [] and len(kept) == 200
