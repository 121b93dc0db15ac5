"""A Cassandra node launched with ``-Dcassandra.unsafesystem=true`` (the test command's
shared node) refuses a kill -9: it would drop the rows of its new tables on restart,
and a fault test would report a loss the harness made. Any other node is killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.infra.cassandra import UNSAFE_SYSTEM_FLAG, Cassandra
from e2e.infra.server import InfraError, Running


def _sleeper(*extra: str) -> subprocess.Popen[bytes]:
    # Its own process group, as the harness's servers are (kill() signals the group).
    argv = [sys.executable, "-c", "import time; time.sleep(60)", *extra]
    return subprocess.Popen(argv, start_new_session=True)


def test_a_node_launched_unsafe_is_not_killed(tmp_path: Path) -> None:
    proc = _sleeper("-Xmx1g", UNSAFE_SYSTEM_FLAG)
    try:
        node = Running(Cassandra(tmp_path, tmp_path), proc.pid, {"native": 1}, "5.0.9")
        with pytest.raises(InfraError, match="unsafesystem"):
            node.kill()
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_crash_safe_node_is_killed(tmp_path: Path) -> None:
    proc = _sleeper("-Xmx1g")
    node = Running(Cassandra(tmp_path, tmp_path), proc.pid, {"native": 1}, "5.0.9")
    node.kill()
    assert proc.wait(timeout=10) == -9
