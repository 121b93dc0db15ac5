from __future__ import annotations

import pytest

from clockwork_svc.domain.load import (
    ClusterLoad,
    DueCounter,
    LoadTracker,
    ScaleDecision,
    WorkerLoad,
    percentile,
)


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([], 0.99) == 0
    assert percentile([7.0], 0.01) == 7


def counter(*due_ms: int) -> DueCounter:
    counted = DueCounter()
    for due in due_ms:
        counted.add(due)
    return counted


def test_report_counts_due_within_window_and_overdue() -> None:
    tracker = LoadTracker(started_ms=0)
    now = 10_000
    due = counter(now - 5_000, now - 500, now, now + 1_000, now + 1_950, now + 2_150, now + 60_000)
    load = tracker.report("w1", now, shards=4, queued=due, in_flight=3, window_s=2.0)
    # within now+2s: the overdue one, the slightly late one, and three ahead
    assert load.due_per_s == pytest.approx(5 / 2.0)
    assert load.overdue == 1  # only the one due more than a second ago
    assert (load.shards, load.in_flight, load.window_s, load.report_ms) == (4, 3, 2.0, now)


def test_due_counter_rounds_to_whole_steps_and_follows_removals() -> None:
    due = counter(999, 1_000, 1_099, 1_100, 5_000, 5_000)
    # "Due by 1,050" counts the whole step 1,000-1,099; "before 1,050" only steps
    # wholly before it.
    assert due.counts(1_050, 1_050) == (3, 1)
    assert due.counts(10_000, 10_000) == (6, 6)
    due.remove(5_000)
    due.remove(999)
    assert due.counts(10_000, 1_000) == (4, 0)
    due.remove(5_000)
    assert due.counts(10_000, 10_000) == (3, 3)
    assert len(due._steps) == 2  # emptied steps are dropped: memory follows the queue


def test_a_large_backlog_is_counted_exactly_in_whole_steps() -> None:
    due = counter(*range(0, 1_000_000, 7))
    assert due.counts(999_999, 500_000) == (len(range(0, 1_000_000, 7)), len(range(0, 500_000, 7)))


def test_report_rates_and_lag_then_resets() -> None:
    tracker = LoadTracker(started_ms=0)
    for lag in range(100):
        tracker.dispatched(float(lag))
    load = tracker.report("w1", 4_000, shards=1, queued=DueCounter(), in_flight=0, window_s=2.0)
    assert load.dispatch_per_s == pytest.approx(25.0)
    assert load.lag_p50_ms == 49
    assert load.lag_p99_ms == 98
    again = tracker.report("w1", 5_000, shards=1, queued=DueCounter(), in_flight=0, window_s=2.0)
    assert again.dispatch_per_s == 0
    assert again.lag_p99_ms == 0


def test_tracker_memory_is_bounded() -> None:
    tracker = LoadTracker(started_ms=0, max_samples=10)
    for lag in range(1000):
        tracker.dispatched(float(lag))
    load = tracker.report("w", 1_000, shards=0, queued=DueCounter(), in_flight=0, window_s=1.0)
    assert load.dispatch_per_s == pytest.approx(1000.0)  # every dispatch is counted
    assert load.lag_p50_ms >= 990  # the latest samples are kept


def test_json_round_trip_and_rejects_garbage() -> None:
    load = WorkerLoad("w-1", 3, 12.5, 2, 10.0, 4.0, 9.5, 7, 2.0, 123)
    assert WorkerLoad.from_json(load.to_json()) == load
    for raw in (b"", b"{}", b"[1]", b'{"worker_id": "x"}', b"\xff"):
        with pytest.raises(ValueError, match="not a worker load report"):
            WorkerLoad.from_json(raw)


def test_cluster_sums_rates_and_takes_the_worst_lag() -> None:
    a = WorkerLoad("a", 2, 10.0, 1, 8.0, 3.0, 20.0, 1, 2.0, 0)
    b = WorkerLoad("b", 2, 5.0, 2, 4.0, 2.0, 90.0, 0, 2.0, 0)
    cluster = ClusterLoad((a, b), shard_count=4, shards_owned=4)
    assert (cluster.due_per_s, cluster.dispatch_per_s, cluster.overdue) == (15.0, 12.0, 3)
    assert cluster.lag_p99_ms == 90.0
    assert ClusterLoad((), 4, 0).lag_p99_ms == 0.0


def test_a_scale_decision_survives_json_and_bad_records_are_refused() -> None:
    decision = ScaleDecision("cw/workers", 2, 3, "demand 40.0/s needs 3", 1_000, 900, "op-1")
    assert ScaleDecision.from_json(decision.to_json()) == decision
    assert decision.changes and not ScaleDecision("d", 2, 2, "fits", 1).changes
    for junk in (b"", b"[]", b'{"deployment": "d"}', b"\xff"):
        with pytest.raises(ValueError, match="not a scale decision"):
            ScaleDecision.from_json(junk)
