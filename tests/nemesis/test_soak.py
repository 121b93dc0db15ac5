"""The soak's short mode, as CI runs it: `python -m e2e.soak` for 72 s at a steady
rate with each of its nemeses once, one every 5 s (a worker kill, a burst of creates ten
times the api's in-flight limit, a worker pause, Cassandra at a tenth of its speed, an
etcd restart); its report must show nothing lost, nothing unexpected, every burst call
answered OK or refused with a hint and no refused create made (it exits 1
otherwise), and the memory of each process sampled."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from e2e.soak import NEMESES
from tests.conftest import require_server

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]


async def test_soak_short_mode(tmp_path: Path) -> None:
    cassandra = require_server("CLOCKWORK_CASSANDRA")
    require_server("CLOCKWORK_ETCD")  # the harness built etcd; the soak runs its own member
    out = tmp_path / "report.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "e2e.soak",
        "--minutes",
        "1.2",
        "--rate",
        "8",
        "--seed",
        "3",
        "--nemesis-every",
        "5",
        "--api-max-in-flight",
        "16",
        "--slow-store-s",
        "6",
        "--memory-every",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--json-out",
        str(out),
        env={**os.environ, "CLOCKWORK_CASSANDRA": cassandra},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), 300)
    print(stdout.decode())
    assert proc.returncode == 0, stdout.decode()[-5000:]
    report = json.loads(out.read_text())
    assert report["lost"] == 0 and report["unexpected"] == 0
    assert report["expected"] > 300 and report["delivered"] > 0
    assert set(report["window_kinds"]) == set(NEMESES), report["window_kinds"]
    assert report["overload_faults"] == 0
    (burst,) = report["bursts"]
    assert burst["calls"] == 160 and burst["ok"] > 0 and burst["refused"] > 0, burst
    assert burst["unclean"] == 0 and burst["hint_max_ms"] is not None, burst
    for name in ("api", "worker1", "cassandra", "etcd"):  # worker0 is the first killed
        memory = report["memory_mb"][name]
        assert memory["samples"] >= 10 and 0 < memory["peak_mb"] < 4096, (name, memory)
