"""The soak's short mode, as CI runs it: `python -m e2e.soak` for a minute at a steady
rate with a worker kill, a worker pause and an etcd restart; its report must show
nothing lost and nothing unexpected (it exits 1 otherwise)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

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
        "1",
        "--rate",
        "8",
        "--seed",
        "3",
        "--nemesis-every",
        "8",
        "--run-dir",
        str(tmp_path / "run"),
        "--json-out",
        str(out),
        env={**os.environ, "CLOCKWORK_CASSANDRA": cassandra},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), 240)
    print(stdout.decode())
    assert proc.returncode == 0, stdout.decode()[-5000:]
    report = json.loads(out.read_text())
    assert report["lost"] == 0 and report["unexpected"] == 0
    assert report["expected"] > 300 and report["delivered"] > 0
    assert {w["name"].split(" ")[0] for w in report["windows"]} >= {"kill", "SIGSTOP"}
