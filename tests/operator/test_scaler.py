"""One autoscaler round against an in-memory Deployment: what it patches, the Event
it posts and the decision it records. The real Deployment, Events and API are
exercised by the Kubernetes e2e test (test_workers_scale_with_load_and_back)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from clockwork_operator.autoscale import ScalePolicy
from clockwork_operator.config import AutoscaleSettings
from clockwork_operator.kube import DeploymentState
from clockwork_operator.scaler import LAST_SCALE_ANNOTATION, REASON_ANNOTATION, Autoscaler
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision, WorkerLoad
from clockwork_svc.errors import Unavailable


class MemoryDeployment:
    def __init__(self, replicas: int) -> None:
        self.state = DeploymentState(replicas, {}, "uid-1")
        self.events: list[str] = []

    async def deployment(self, namespace: str, name: str) -> DeploymentState:
        return self.state

    async def scale_deployment(
        self, namespace: str, name: str, replicas: int, annotations: Mapping[str, str]
    ) -> None:
        self.state = DeploymentState(replicas, {**self.state.annotations, **annotations}, "uid-1")

    async def post_event(self, namespace: str, involved: Mapping[str, str], *args: str) -> None:
        self.events.append(args[-2])


def load(due_per_s: float) -> ClusterLoad:
    worker = WorkerLoad("w", 8, due_per_s, 0, due_per_s, 1.0, 2.0, 0, 2.0, 0)
    return ClusterLoad((worker,), 8, 8)


class Rig:
    def __init__(self, replicas: int, fail_recording: bool = False) -> None:
        self.kube = MemoryDeployment(replicas)
        self.due = 0.0
        self.now = 1_000.0
        self.recorded: list[ScaleDecision] = []
        self.fail_recording = fail_recording
        policy = ScalePolicy(1, 4, target_per_replica=10, scale_up_cooldown_s=5)
        kube: Any = self.kube
        self.scaler = Autoscaler(
            AutoscaleSettings("cw", "workers", policy),
            kube,
            self.read_load,
            lambda: True,
            self.record,
            "operator-a",
            wall=lambda: self.now,
        )

    async def read_load(self) -> ClusterLoad:
        return load(self.due)

    async def record(self, decision: ScaleDecision) -> ScaleDecision:
        if self.fail_recording:
            raise Unavailable("etcd at 127.0.0.1:1: connection refused")
        self.recorded.append(decision)
        return decision


async def test_each_round_records_its_decision_a_change_or_a_hold() -> None:
    rig = Rig(replicas=1)
    rig.due = 25.0
    await rig.scaler.round()
    assert rig.kube.state.replicas == 3
    assert rig.kube.state.annotations[REASON_ANNOTATION] == "demand 25.0/s needs 3"
    assert rig.kube.events == ["workers 1 -> 3: demand 25.0/s needs 3"]
    [up] = rig.recorded
    assert up == ScaleDecision(
        "cw/workers", 1, 3, "demand 25.0/s needs 3", 1_000_000, 1_000_000, "operator-a"
    )

    rig.now += 2
    rig.due = 38.0  # wants 4, but the cool-down (5 s) has not passed: a hold
    await rig.scaler.round()
    hold = rig.recorded[-1]
    assert (hold.current_replicas, hold.desired_replicas) == (3, 3) and not hold.changes
    assert hold.reason == "scale-up to 4 waits for the cool-down"
    assert (hold.decide_ms, hold.last_change_ms) == (1_002_000, 1_000_000)
    assert rig.kube.state.annotations[LAST_SCALE_ANNOTATION] == "1000.000"


async def test_a_decision_that_cannot_be_recorded_still_scales(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(replicas=1, fail_recording=True)
    rig.due = 25.0
    await rig.scaler.round()
    assert rig.kube.state.replicas == 3
    assert "cannot record the decision: etcd at 127.0.0.1:1" in caplog.text
