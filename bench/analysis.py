"""Judging a fire run: lost and duplicated deliveries (the project's checker), lag
percentiles, and per-second series of throughput and lag for the plot."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from bench.common import pct
from bench.sink import Arrival
from e2e.checker import check


def judge(expected_due: Mapping[str, int], arrivals: Sequence[Arrival]) -> dict[str, Any]:
    """Lost/duplicated/unexpected/early counts and lag (first receive minus due), in ms."""
    result = check(expected_due, arrivals)
    lags = sorted(result.lag_ms)
    relevant = [a for a in arrivals if a.delivery_id in expected_due]
    first = min((a.received_us for a in relevant), default=0)
    last = max((a.received_us for a in relevant), default=0)
    due_first = min(expected_due.values(), default=0)
    span_s = max(1e-3, (last / 1000 - due_first) / 1000)
    return {
        "expected": result.expected,
        "received": len(relevant),
        "lost": len(result.lost),
        "duplicated": sum(n - 1 for n in result.duplicated.values()),
        "unexpected": len(result.unexpected),
        # Received before it was due: the scheduler's clock ran ahead of the sink's.
        "early": sum(1 for lag in lags if lag < 0),
        "deliveries_per_s": round(len({a.delivery_id for a in relevant}) / span_s, 1),
        "lag_p50_ms": pct(lags, 0.5),
        "lag_p99_ms": pct(lags, 0.99),
        "lag_max_ms": float(lags[-1]) if lags else float("nan"),
        "first_receive_after_due_ms": round(first / 1000 - due_first, 1) if relevant else None,
    }


def series(expected_due: Mapping[str, int], arrivals: Sequence[Arrival]) -> dict[str, list[float]]:
    """Per second of receive time (from the first due time): deliveries and lag p50/p99."""
    due_first = min(expected_due.values(), default=0)
    lags: dict[int, list[int]] = defaultdict(list)
    for a in arrivals:
        due = expected_due.get(a.delivery_id)
        if due is not None:
            lags[(a.received_ms - due_first) // 1000].append(a.received_ms - due)
    seconds = sorted(lags)
    return {
        "t_s": [float(s) for s in seconds],
        "deliveries": [float(len(lags[s])) for s in seconds],
        "lag_p50_ms": [pct(lags[s], 0.5) for s in seconds],
        "lag_p99_ms": [pct(lags[s], 0.99) for s in seconds],
    }
