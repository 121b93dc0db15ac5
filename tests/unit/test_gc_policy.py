"""The api and worker processes exempt their start-up heap from the cyclic collector
(clockwork_svc/gc_policy.py). Run in a child process: freezing pytest's own heap
would change every later test."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
    print("frozen", frozen, "tracked", len(tracked))
    """
)


def test_start_up_heap_is_frozen_and_later_objects_are_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("frozen ")
