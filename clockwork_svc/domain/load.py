"""Worker load: what each worker reports about its recent and upcoming work, and the
cluster-wide sum the operator sizes the worker Deployment by. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from clockwork_svc.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    worker_id: str
    shards: int
    # Prefetched firings due within `window_s` from now (overdue ones included) / window.
    due_per_s: float
    # Due more than a second ago and not yet handed to a delivery.
    overdue: int
    # Deliveries started per second over the last report interval.
    dispatch_per_s: float
    lag_p50_ms: float
    lag_p99_ms: float
    in_flight: int
    window_s: float
    report_ms: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> WorkerLoad:
        """Raises ValueError on anything that is not a report this version wrote."""
        try:
            data = json.loads(raw)
            return cls(
                worker_id=str(data["worker_id"]),
                shards=int(data["shards"]),
                due_per_s=float(data["due_per_s"]),
                overdue=int(data["overdue"]),
                dispatch_per_s=float(data["dispatch_per_s"]),
                lag_p50_ms=float(data["lag_p50_ms"]),
                lag_p99_ms=float(data["lag_p99_ms"]),
                in_flight=int(data["in_flight"]),
                window_s=float(data["window_s"]),
                report_ms=int(data["report_ms"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a worker load report: {exc}") from exc


MAX_REASON_CHARS = 1024
MAX_DEPLOYMENT_CHARS = 253 * 2 + 1  # namespace/name, each a DNS name
MAX_REPLICAS = 100_000


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """One round of the autoscaler: the replicas it found and the ones it chose."""

    deployment: str
    current_replicas: int
    desired_replicas: int
    reason: str
    decide_ms: int
    # When the replicas last changed; None if never.
    last_change_ms: int | None = None
    decided_by: str = ""

    @property
    def changes(self) -> bool:
        return self.current_replicas != self.desired_replicas

    def validate(self) -> None:
        """Raises InvalidArgument naming the first bad field."""
        if not self.deployment or len(self.deployment) > MAX_DEPLOYMENT_CHARS:
            raise InvalidArgument(
                "deployment", f"must be 1 to {MAX_DEPLOYMENT_CHARS} characters (namespace/name)"
            )
        for name, replicas in (
            ("current_replicas", self.current_replicas),
            ("desired_replicas", self.desired_replicas),
        ):
            if not 0 <= replicas <= MAX_REPLICAS:
                raise InvalidArgument(name, f"must be between 0 and {MAX_REPLICAS}")
        if not self.reason or len(self.reason) > MAX_REASON_CHARS:
            raise InvalidArgument("reason", f"must be 1 to {MAX_REASON_CHARS} characters")
        if self.decide_ms <= 0:
            raise InvalidArgument("decide_time", "is required")
        if len(self.decided_by) > MAX_DEPLOYMENT_CHARS:
            raise InvalidArgument(
                "decided_by", f"must be at most {MAX_DEPLOYMENT_CHARS} characters"
            )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ScaleDecision:
        """Raises ValueError on anything that is not a decision this version wrote."""
        try:
            data = json.loads(raw)
            last = data.get("last_change_ms")
            return cls(
                deployment=str(data["deployment"]),
                current_replicas=int(data["current_replicas"]),
                desired_replicas=int(data["desired_replicas"]),
                reason=str(data["reason"]),
                decide_ms=int(data["decide_ms"]),
                last_change_ms=None if last is None else int(last),
                decided_by=str(data.get("decided_by", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a scale decision: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    workers: tuple[WorkerLoad, ...]
    shard_count: int
    shards_owned: int
    # (shard, worker id, epoch) of each owned shard, by shard.
    owners: tuple[tuple[int, str, int], ...] = ()
    # The autoscaler's latest recorded decision, if any.
    scale_decision: ScaleDecision | None = None

    @property
    def due_per_s(self) -> float:
        return sum(w.due_per_s for w in self.workers)

    @property
    def dispatch_per_s(self) -> float:
        return sum(w.dispatch_per_s for w in self.workers)

    @property
    def overdue(self) -> int:
        return sum(w.overdue for w in self.workers)

    @property
    def lag_p99_ms(self) -> float:
        """The worst worker's: one slow worker is a lagging cluster for its shards."""
        return max((w.lag_p99_ms for w in self.workers), default=0.0)


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


class DueCounter:
    """How many queued firings fall due by a given time, kept up to date as firings
    are queued and taken (O(1) each) so that a report reads it in O(distinct 100 ms
    steps), not O(queued firings): a worker with a million firings queued reports
    without stopping its event loop for a walk over them all. Counts are in whole
    steps of `STEP_MS`: a firing within one step of a bound may fall either side."""

    STEP_MS = 100

    def __init__(self) -> None:
        self._steps: dict[int, int] = {}

    def add(self, due_ms: int) -> None:
        step = due_ms // self.STEP_MS
        self._steps[step] = self._steps.get(step, 0) + 1

    def remove(self, due_ms: int) -> None:
        step = due_ms // self.STEP_MS
        left = self._steps[step] - 1
        if left:
            self._steps[step] = left
        else:
            del self._steps[step]

    def counts(self, by_ms: int, before_ms: int) -> tuple[int, int]:
        """(firings due by `by_ms`, firings due before `before_ms`): the first counts
        the whole step holding `by_ms`, the second only steps wholly before `before_ms`."""
        by_step, before_step = by_ms // self.STEP_MS, before_ms // self.STEP_MS
        by = before = 0
        for step, n in self._steps.items():
            if step <= by_step:
                by += n
                if step < before_step:
                    before += n
        return by, before


class LoadTracker:
    """Collects dispatches and their lag between two reports. Bounded: it keeps the
    latest `max_samples` lag values of the interval (all of them at moderate rates)."""

    def __init__(self, started_ms: int, max_samples: int = 4096) -> None:
        self._since_ms = started_ms
        self._count = 0
        self._lags: deque[float] = deque(maxlen=max_samples)

    def dispatched(self, lag_ms: float) -> None:
        self._count += 1
        self._lags.append(lag_ms)

    def report(
        self,
        worker_id: str,
        now_ms: int,
        *,
        shards: int,
        queued: DueCounter,
        in_flight: int,
        window_s: float,
    ) -> WorkerLoad:
        """The report for the interval since the previous one; starts a new interval."""
        due, overdue = queued.counts(now_ms + int(window_s * 1000), now_ms - 1000)
        elapsed_s = max(0.001, (now_ms - self._since_ms) / 1000)
        lags = sorted(self._lags)
        load = WorkerLoad(
            worker_id=worker_id,
            shards=shards,
            due_per_s=due / window_s if window_s > 0 else 0.0,
            overdue=overdue,
            dispatch_per_s=self._count / elapsed_s,
            lag_p50_ms=percentile(lags, 0.5),
            lag_p99_ms=percentile(lags, 0.99),
            in_flight=in_flight,
            window_s=window_s,
            report_ms=now_ms,
        )
        self._since_ms = now_ms
        self._count = 0
        self._lags.clear()
        return load
