"""bench.fire compares only its saturating runs with the raw HTTP limit."""

from __future__ import annotations

from bench.fire import best_saturating_rate


def test_the_best_rate_leaves_out_the_warm_up_half_rate_and_burst() -> None:
    runs = [
        {"run": "warm-up", "deliveries_per_s": 9_000.0},
        {"run": "saturate-w1", "deliveries_per_s": 2_000.0},
        {"run": "saturate-w2", "deliveries_per_s": 2_300.0},
        {"run": "half-rate", "deliveries_per_s": 8_000.0},
        {"run": "burst", "deliveries_per_s": 7_000.0},
    ]
    assert best_saturating_rate(runs) == 2_300.0
