"""The harness's check of a cluster's logs (e2e/cluster.py): a fault that Clockwork's
own code logs at ERROR or above is found in the format its processes write, and
nothing else is (the faults it handles, other libraries' lines, plain text)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from e2e.cluster import Cluster

# A process configured as `clockwork worker` configures itself, logging JSON to stderr.
LOGGING = """
import logging
from clockwork_svc.observability.logging import configure
configure("INFO", json_output=True)
scanner = logging.getLogger("clockwork_svc.worker.shard_scanner")
scanner.warning("shard %d: store unavailable, retrying: %s", 3, "timeout")
logging.getLogger("cassandra.cluster").error("Control connection failed")
print("plain text on stderr", file=__import__("sys").stderr)
try:
    max(*[])
except TypeError:
    scanner.exception("shard %d: scan failed unexpectedly, retrying", 3)
logging.getLogger("clockwork_svc.worker.worker").critical("sweeper ended unexpectedly")
"""


def _cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path, "127.0.0.1:9042", "127.0.0.1:2379")


def test_the_faults_clockwork_did_not_expect_are_found(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    with cluster.log_path("worker0.log").open("wb") as log:
        subprocess.run([sys.executable, "-c", LOGGING], stderr=log, check=True)
    faults = cluster.unexpected_faults()
    assert len(faults) == 2, faults
    assert faults[0].startswith("worker0.log: shard 3: scan failed unexpectedly, retrying")
    assert "TypeError" in faults[0]
    assert faults[1] == "worker0.log: sweeper ended unexpectedly"


def test_only_the_clusters_own_logs_are_read(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.log_path("api1.log").write_text(
        '{"event": "handled", "level": "warning", "logger": "clockwork_svc.api"}\n'
    )
    (tmp_path / "other.log").write_text(
        '{"event": "x", "level": "error", "logger": "clockwork_svc.worker.worker"}\n'
    )
    cluster.log_path("worker9.log")  # never written: a process that did not start
    assert cluster.unexpected_faults() == []
