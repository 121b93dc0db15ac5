"""What the firing path reports about each firing: its metrics and its log lines, kept
out of the steps that decide and write (clockwork_svc/worker/dispatcher.py)."""

from __future__ import annotations

import logging

from clockwork_svc.domain.model import Execution, Firing, Outcome
from clockwork_svc.observability.metrics import Metrics

log = logging.getLogger("clockwork_svc.worker.dispatcher")


class FiringObserver:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def schedule_read(self, firing: Firing, now_ms: int) -> None:
        """The schedule was read ahead of the due time: a read that returns after it (a
        slow or paused store) is the store's share of this firing's lag."""
        self._metrics.read_late.observe(max(0, now_ms - firing.fire_at_ms) / 1000)

    def sending(self, firing: Firing, now_ms: int) -> None:
        self._metrics.fire_lag.observe(max(0, now_ms - firing.fire_at_ms) / 1000)

    def delivered(self, started_ms: int, finished_ms: int) -> None:
        self._metrics.delivery_duration.observe(max(0, finished_ms - started_ms) / 1000)

    def finished(self, firing: Firing, execution: Execution) -> None:
        """The firing is recorded and done."""
        self._metrics.firings.labels(execution.outcome.value, firing.tenant).inc()
        if execution.outcome in (Outcome.RETRYING, Outcome.FAILED):
            log.info(
                "delivery %s attempt %d: %s %s",
                firing.delivery_id,
                firing.attempt,
                execution.outcome.value,
                execution.error,
            )

    def missed(self, tenant: str, reason: str, count: int = 1) -> None:
        """Occurrences not sent: `reason` is overlap, misfire or expired."""
        self._metrics.occurrences_missed.labels(tenant, reason).inc(count)

    def schedule_paused(self, tenant: str, key: str, note: str) -> None:
        log.warning("schedule %s/%s %s", tenant, key, note)

    def schedule_stopped(self, tenant: str, key: str) -> None:
        log.info("schedule %s/%s cancelled: target answered 410 Gone", tenant, key)
