"""Each benchmark runs at a tiny size and completes with nothing lost. No speed
assertions: the machine is shared, and benchmarks are not timed tests."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_server

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def run_bench(
    module: str,
    out: Path,
    *args: str,
    timeout_s: float = 240,
    env: dict[str, str] | None = None,
    servers: bool = True,
) -> dict[str, Any]:
    if servers:
        require_server("CLOCKWORK_CASSANDRA")
        require_server("CLOCKWORK_ETCD")
    completed = subprocess.run(
        [sys.executable, "-m", module, "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "CLOCKWORK_LOG_LEVEL": "WARNING", **(env or {})},
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    name = module.rsplit(".", 1)[1]
    report: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    return report


def test_accept(tmp_path: Path) -> None:
    report = run_bench(
        "bench.accept",
        tmp_path,
        "--n",
        "200",
        "--concurrency",
        "8",
        "--raw-concurrency",
        "32",
        "--batch",
        "100",
        "--shards",
        "8",
        "--labels",
        "3",
    )
    assert report["warm_up"]["n"] == 50  # a quarter of --n, not counted in the modes
    assert [(m["n"], m["labels"]) for m in report["modes"][1:]] == [(200, 0), (200, 3)]
    assert [(r["kind"], r["errors"]) for r in report["raw"]] == [("plain", 0), ("conditional", 0)]
    assert report["ratio_labelled_to_plain_batch"] > 0
    assert report["ratio_api_to_raw_plain"] > 0
    assert report["ratio_api_to_raw_conditional"] > 0


def test_api_overhead(tmp_path: Path) -> None:
    report = run_bench(
        "bench.api_overhead",
        tmp_path,
        "--n",
        "300",
        "--concurrency",
        "16",
        "--rounds",
        "1",
        servers=False,
    )
    (only,) = report["rounds"]
    assert only["bare_cpu_us"] > 0 and only["pipeline_cpu_us"] > 0
    assert only["bare_calls_per_s"] > 0 and only["pipeline_calls_per_s"] > 0


def test_fire(tmp_path: Path) -> None:
    report = run_bench(
        "bench.fire",
        tmp_path,
        "--m",
        "300",
        "--workers",
        "1",
        "--window-s",
        "2",
        "--steady-s",
        "2",
        "--fixed-rate",
        "50",
        "--fixed-s",
        "1",
        "--gc-young-threshold",
        "2000",
        "--shards",
        "8",
        env={"BENCH_LOG_LEVEL": "INFO"},  # the processes' start-up lines, in report["logs"]
    )
    runs = report["runs"]
    assert [r["run"] for r in runs] == ["warm-up", "saturate-w1", "half-rate", "fixed-50-per-s"]
    assert runs[-1]["n"] == 50
    # The threshold reached the api and the worker (each logs the collector's value).
    assert report["gc_young_threshold"] == 2000
    logs = {p.name: p.read_text() for p in Path(report["logs"]).glob("*.log")}
    started = [name for name, text in logs.items() if "every 2000 allocations" in text]
    assert {"api1.log", "worker0.log"} <= set(started), sorted(logs)
    for r in runs:
        assert (r["lost"], r["unexpected"], r["received"]) == (0, 0, r["n"]), r
        assert r["early"] == 0, r  # one machine: cluster time is the sink's clock
    assert report["raw"]["received"] == 300
    # The load generator's and the sink's CPU over the raw run, per 100k requests (the
    # sink's few ticks at this size may round to 0; the driver's do not).
    assert report["raw"]["driver_cpu_s_per_100k"] > 0, report["raw"]
    assert report["raw"]["sink_cpu_s_per_100k"] >= 0, report["raw"]
    # The raw limits with a durable scheduler's store work: every firing written, read
    # back by the scan, delivered once and recorded (the clockwork-store level reads
    # the saturating run's real schedules: a missing one would be an error).
    levels = {r["level"]: r for r in report["raw_durable"]}
    assert set(levels) == {"minimal", "clockwork-store"}
    for r in levels.values():
        assert (r["errors"], r["received"], r["n"]) == (0, 300, 300), r
        assert r["deliveries_per_s"] > 0 and r["cassandra_cpu_s_per_100k"] > 0, r
    assert report["ratio_minimal_durable_to_raw"] > 0
    assert report["ratio_clockwork_to_clockwork_store"] > 0
    assert (tmp_path / "fire.png").stat().st_size > 0
    # As the node reports it (the test command's harness syncs before acknowledging).
    assert report["durability"] == "Cassandra commitlog_sync=batch"


def test_fire_to_kafka(tmp_path: Path) -> None:
    """The same phases and limits with the harness's Kafka as the target: every firing
    produced once (read back by the sink's consumer), and the raw limits produce too."""
    require_server("CLOCKWORK_KAFKA")
    report = run_bench(
        "bench.fire",
        tmp_path,
        "--target",
        "kafka",
        "--m",
        "300",
        "--workers",
        "1",
        "--window-s",
        "2",
        "--steady-s",
        "2",
        "--warm-up",
        "0",
        "--shards",
        "8",
    )
    assert report["target"] == "kafka"
    runs = report["runs"]
    assert [r["run"] for r in runs] == ["saturate-w1", "half-rate"]
    for r in runs:
        assert (r["lost"], r["unexpected"], r["received"], r["early"]) == (0, 0, r["n"], 0), r
        assert "kafka_cpu_s_per_100k" in r, r  # the broker's CPU is part of the cost
    assert report["raw"]["run"].startswith("raw aiokafka")
    assert report["raw"]["received"] == 300
    for r in report["raw_durable"]:
        assert (r["errors"], r["received"], r["n"]) == (0, 300, 300), r
    assert report["ratio_minimal_durable_to_raw"] > 0


def test_cost(tmp_path: Path) -> None:
    report = run_bench(
        "bench.cost",
        tmp_path,
        "--pending",
        "1200",
        "--idle-s",
        "2",
        "--shards",
        "8",
    )
    bulk = report["bulk"]
    assert bulk["created"] == 1200 and bulk["per_s"] > 0 and len(bulk["per_s_by_tenth"]) == 10
    assert bulk["slowest_tenth_vs_first"] > 0 and bulk["ended_before_first_due"]
    assert bulk["rss_mb"]["worker0"]["peak_mb"] > 0 and bulk["api_ms_per_create"] > 0
    for phase in ("idle_empty", "idle_full"):
        assert report[phase]["worker_peak_rss_mb"] > 0, report[phase]
    assert report["storage"]["bytes_per_schedule"] > 0, report["storage"]
    assert report["storage"]["flush_settled"], report["storage"]


def test_store_ops(tmp_path: Path) -> None:
    report = run_bench("bench.store_ops", tmp_path, "--n", "300", "--reps", "1")
    loops = {row["loop"]: row for row in report["loops"]}
    assert list(loops) == [
        "minimal",
        "scan, full rows",
        "scan, keys only",
        "record",
        "read + record",
    ]
    assert all(loops[name]["n"] == 300 for name in loops)
    assert all(loops[name]["errors"] == 0 for name in ("minimal", "record", "read + record"))
    assert loops["read + record"]["client_us_per_firing"] > 0


def test_overload(tmp_path: Path) -> None:
    # A limit of 8 in flight: the burst of 160 calls is refused in part, cleanly.
    report = run_bench(
        "bench.overload",
        tmp_path,
        "--max-in-flight", "8",
        "--factors", "20",
        "--retried-factor", "20",
        "--connections", "2",
        "--capacity-n", "100",
        "--shards", "8",
    )  # fmt: skip
    capacity, burst, retried = report["phases"]
    assert capacity["calls"] == 100 and capacity["api_ms_per_create"] > 0
    assert burst["unclean"] == 0 and burst["ok"] > 0
    assert burst["ok"] + burst["invalid_argument"] + burst["unavailable"] == 160
    assert retried["failed"] == 0 and retried["created_twice"] == 0
    assert retried["found_after"] == 160


def test_isolation(tmp_path: Path) -> None:
    # Four slots, half for one tenant: the hung tenant takes two (held 10 s, past the
    # phase), the steady one delivers everything beside it.
    report = run_bench(
        "bench.isolation",
        tmp_path,
        "--rate", "50",
        "--window-s", "2",
        "--hold-s", "10",
        "--slots", "4",
        "--shares", "0.5",
        "--shards", "8",
    )  # fmt: skip
    alone, beside = report["rows"]
    assert (alone["phase"], beside["phase"]) == ("alone", "beside hung tenant")
    assert alone["not_arrived"] == beside["not_arrived"] == 0
    assert alone["n"] == beside["n"] == 100
    # The hung tenant holds two slots (half of four) and no more.
    assert alone["hung_reached"] is None and beside["hung_reached"] == 2, beside


def test_handover(tmp_path: Path) -> None:
    report = run_bench("bench.handover", tmp_path, "--shards", "8", "--rounds", "1")
    [figures] = report["rounds"]
    assert set(figures) == {"leave_s", "join_s", "crash_s"}
    assert all(seconds > 0 for seconds in figures.values()), figures
    # A crash waits for the lease to expire; a leave hands the shards back at once.
    assert figures["crash_s"] > figures["leave_s"], figures


def test_peers(tmp_path: Path) -> None:
    if (
        importlib.util.find_spec("celery") is None
        or importlib.util.find_spec("apscheduler") is None
        or shutil.which("redis-server") is None
    ):
        why = "peers need the bench extras and redis-server (scripts/test.sh installs them)"
        if os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
            pytest.fail(why)
        pytest.skip(why)
    report = run_bench(
        "bench.peers",
        tmp_path,
        "--m",
        "200",
        "--window-s",
        "2",
        "--light-rate",
        "20",
        "--light-s",
        "2",
        "--warm-up",
        "0",
        "--shards",
        "8",
        "--gc-young-threshold",
        "2000",
    )
    assert report["gc_young_threshold"] == 2000
    assert [(r["scheduler"], r["workload"]) for r in report["runs"]] == [
        (scheduler, workload)
        for scheduler in ("clockwork", "celery", "apscheduler")
        for workload in ("saturate", "light")
    ]
    for r in report["runs"]:
        assert r["lost"] == 0, r
    # Celery's Redis ran at Cassandra's durability: an AOF synced before every reply.
    assert "appendfsync always" in report["durability"], report["durability"]
    aof = list(Path(report["logs"], "appendonlydir").glob("*.incr.aof"))
    assert aof and sum(f.stat().st_size for f in aof) > 0, aof


@pytest.mark.parametrize("module", ["bench.fire", "bench.peers"])
@pytest.mark.parametrize(
    ("value", "error"),
    [("50", "must be 100 to 1000000, not 50"), ("1000001", "not 1000001"), ("x", "integer")],
)
def test_gc_young_threshold_refused_before_anything_starts(
    module: str, value: str, error: str
) -> None:
    """Checked against the workers' own bounds by argparse: no server is needed."""
    completed = subprocess.run(
        [sys.executable, "-m", module, "--gc-young-threshold", value],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CLOCKWORK_")},
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert "argument --gc-young-threshold" in completed.stderr
    assert error in completed.stderr


def test_dashboard(tmp_path: Path) -> None:
    report = run_bench(
        "bench.dashboard", tmp_path, "--schedules", "600", "--dead-letters", "40", "--reps", "2"
    )
    pages = {row["page"]: row for row in report["pages"]}
    assert len(pages) == 10 and pages["schedules, first page"]["kB"] > 5
    assert pages["schedules, label selector (1 in 10)"]["kB"] > 5  # a full page of 50
