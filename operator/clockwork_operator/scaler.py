"""The autoscaling loop: every interval, while this operator leads, read the cluster
load from the API, decide (autoscale.decide) and patch the worker Deployment's
replicas, posting an Event for every change. The time of the last change is kept in
an annotation on the Deployment, so the cool-down survives an operator fail-over.
Every round's decision, a change or not, is recorded through the API
(RecordScaleDecision), where GetClusterLoad and the dashboard show it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from clockwork_operator.autoscale import Decision, Load, decide
from clockwork_operator.config import AutoscaleSettings
from clockwork_operator.kube import Kube, KubeError
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision
from clockwork_svc.errors import ClockworkError

log = logging.getLogger(__name__)

LAST_SCALE_ANNOTATION = "clockwork.io/last-scale-time"
REASON_ANNOTATION = "clockwork.io/last-scale-reason"
COMPONENT = "clockwork-operator"


@dataclass(frozen=True, slots=True)
class Round:
    """What one round saw and did (for logs and tests)."""

    current: int
    decision: Decision
    load: Load


class Autoscaler:
    def __init__(
        self,
        settings: AutoscaleSettings,
        kube: Kube,
        read_load: Callable[[], Awaitable[ClusterLoad]],
        is_leader: Callable[[], bool],
        record: Callable[[ScaleDecision], Awaitable[object]],
        identity: str,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._kube = kube
        self._read_load = read_load
        self._is_leader = is_leader
        self._record = record
        self._identity = identity
        self._wall = wall

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval_s)
            if not self._is_leader():
                continue
            try:
                await self.round()
            except (KubeError, OSError) as exc:
                log.warning("autoscaler: %s", exc)
            except ClockworkError as exc:
                log.warning("autoscaler: cannot read the cluster load: %s", exc)

    async def round(self) -> Round:
        s = self._settings
        cluster = await self._read_load()
        load = Load(cluster.due_per_s, cluster.dispatch_per_s, cluster.overdue, cluster.lag_p99_ms)
        deployment = await self._kube.deployment(s.namespace, s.deployment)
        now = self._wall()
        last = _float(deployment.annotations.get(LAST_SCALE_ANNOTATION))
        decision = decide(s.policy, load, deployment.replicas, now, last)
        if decision.changes(deployment.replicas):
            annotations = {LAST_SCALE_ANNOTATION: f"{now:.3f}", REASON_ANNOTATION: decision.reason}
            await self._kube.scale_deployment(
                s.namespace, s.deployment, decision.replicas, annotations
            )
            message = f"workers {deployment.replicas} -> {decision.replicas}: {decision.reason}"
            log.info("autoscaler: %s", message)
            involved = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": s.deployment,
                "uid": deployment.uid,
            }
            await self._kube.post_event(
                s.namespace, involved, "Normal", "ScaledWorkers", message, COMPONENT
            )
            last = now
        record = ScaleDecision(
            deployment=f"{s.namespace}/{s.deployment}",
            current_replicas=deployment.replicas,
            desired_replicas=decision.replicas,
            reason=decision.reason,
            decide_ms=int(now * 1000),
            last_change_ms=None if last is None else int(last * 1000),
            decided_by=self._identity,
        )
        try:
            await self._record(record)
        except ClockworkError as exc:
            # Only what operators see is lost; the scaling itself is done.
            log.warning("autoscaler: cannot record the decision: %s", exc)
        return Round(deployment.replicas, decision, load)


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None
