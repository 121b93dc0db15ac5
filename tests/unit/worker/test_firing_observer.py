"""What the firing path reports: one firings count per outcome, a log line only for a
delivery that failed or will be retried, the lag and duration histograms."""

from __future__ import annotations

import logging

import pytest

from clockwork_svc.domain import planning
from clockwork_svc.domain.model import Execution, Firing, Outcome
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.worker.firing_observer import FiringObserver

FIRING = Firing(
    shard=0,
    fire_at_ms=10_000,
    firing_id="f1",
    tenant="t",
    schedule_key="k",
    schedule_id="s",
    version=1,
    seq=0,
    occurrence_ms=10_000,
    attempt=2,
    delivery_id="d1",
)


def executed(outcome: Outcome, error: str = "") -> Execution:
    return Execution("t", "k", "f1", "d1", 2, 10_000, 10_000, 10_050, 5, outcome, error=error)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.mark.parametrize("outcome", list(Outcome))
def test_each_outcome_is_counted_once(outcome: Outcome) -> None:
    metrics = Metrics()
    FiringObserver(metrics).finished(FIRING, executed(outcome))
    assert value(metrics, "clockwork_firings_total", outcome=outcome.value, tenant="t") == 1.0


def test_only_failed_and_retried_deliveries_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    observer = FiringObserver(Metrics())
    with caplog.at_level(logging.INFO):
        observer.finished(FIRING, executed(Outcome.SUCCEEDED))
        observer.finished(FIRING, planning.expired(FIRING, 90_000))
        assert caplog.records == []
        observer.finished(FIRING, executed(Outcome.RETRYING, "HTTP 503"))
        observer.finished(FIRING, executed(Outcome.FAILED, "HTTP 404"))
    assert [r.getMessage() for r in caplog.records] == [
        "delivery d1 attempt 2: retrying HTTP 503",
        "delivery d1 attempt 2: failed HTTP 404",
    ]


def test_lag_read_lateness_and_duration_are_observed_in_seconds() -> None:
    metrics = Metrics()
    observer = FiringObserver(metrics)
    observer.schedule_read(FIRING, 9_800)  # read ahead: not late
    observer.sending(FIRING, 10_250)
    observer.delivered(10_250, 10_300)
    assert value(metrics, "clockwork_schedule_read_late_seconds_sum") == 0.0
    assert value(metrics, "clockwork_fire_lag_seconds_sum") == 0.25
    assert value(metrics, "clockwork_delivery_duration_seconds_sum") == 0.05
