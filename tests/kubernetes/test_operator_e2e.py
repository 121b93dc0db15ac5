"""End to end on a real control plane (kube-apiserver, controller-manager, scheduler,
kwok nodes): `helm install` the chart, run the api, a worker and the operator as local
processes against real Cassandra and etcd, then drive it with kubectl like a platform
team would: apply a ClockworkSchedule and get callbacks and a status, suspend it,
resume it, delete it, apply invalid ones, and load the cluster to watch the worker
Deployment scale up and back down."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.load import ScaleDecision
from clockwork_svc.domain.model import ScheduleState
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from tests.conftest import require_server
from tests.kubernetes.conftest import CHART, KubeTools
from tests.kubernetes.support import eventually, manifest
from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving
from tests.support.sink import RecordingSink

# One installation for the module: helm install, api, worker, operator are set up once.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420), pytest.mark.asyncio(loop_scope="module")]

ADMIN = "e2e-admin-token-" + uuid.uuid4().hex[:8]
MIN_WORKERS, MAX_WORKERS = 1, 3
TARGET_PER_WORKER = 15.0
API_RATE = 40  # the operator's reconciles a second against Clockwork
# Resources applied at once by the flood test (CLOCKWORK_FLOOD_N=10000 for the full size).
FLOOD_N = int(os.environ.get("CLOCKWORK_FLOOD_N", "300"))
# Seconds between status refreshes: short for the lifecycle test; the full-size flood
# runs with the default (30), as a status timer per resource costs the operator CPU.
STATUS_INTERVAL = os.environ.get("CLOCKWORK_E2E_STATUS_INTERVAL", "2")


@dataclass
class Stack:
    kube: KubeTools
    namespace: str  # the release's
    team: str  # where the team's ClockworkSchedules live
    release: str
    api_address: str
    sink: RecordingSink
    operator_log: Path
    processes: list[ClockworkProcess]

    @property
    def workers(self) -> str:
        return f"{self.release}-clockwork-worker"

    def admin(self, tenant: str | None = None) -> ClockworkClient:
        return ClockworkClient(ClientSettings(self.api_address, tenant=tenant, token=ADMIN))

    async def kubectl(self, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        return await self.kube.arun(self.kube.kubectl, *args, stdin=stdin)

    async def schedule(self, name: str) -> dict[str, Any]:
        return await self.kube.kubectl_json("-n", self.team, "get", "cws", name)

    async def replicas(self) -> int:
        dep = await self.kube.kubectl_json("-n", self.namespace, "get", "deploy", self.workers)
        return int(dep["spec"]["replicas"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory, kube: KubeTools) -> AsyncIterator[Stack]:
    tmp_path = tmp_path_factory.mktemp("k8s-e2e")
    sink = await RecordingSink().start()
    cassandra = require_server("CLOCKWORK_CASSANDRA")
    etcd = require_server("CLOCKWORK_ETCD")
    suffix = uuid.uuid4().hex[:8]
    env = {
        "CLOCKWORK_CASSANDRA": cassandra,
        "CLOCKWORK_KEYSPACE": f"k8s_{suffix}",
        "CLOCKWORK_ETCD": etcd,
        "CLOCKWORK_CLUSTER": f"k8s-{suffix}",
        "CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT": "30",
    }
    code, _, err = await run_cli(
        "schema", "migrate", "--replication-factor", "1", "--shards", "8", env=env
    )
    assert code == 0, err
    api_address = f"127.0.0.1:{free_port()}"
    private = ["--allow-private-targets", "127.0.0.0/8", "--ops-listen", "127.0.0.1:0"]
    processes = [
        await ClockworkProcess(
            ["api", "--listen", api_address, "--admin-token", ADMIN, *private],
            tmp_path / "api.log",
            env,
        ).start(),
        await ClockworkProcess(
            ["worker", "--lease-ttl", "4", *private], tmp_path / "worker.log", env
        ).start(),
    ]
    namespace, team, release = f"cw-{suffix}", f"team-{suffix}", "e2e"
    peering = f"clockwork-{suffix}"
    stack = Stack(
        kube, namespace, team, release, api_address, sink, tmp_path / "operator.log", processes
    )
    operator: asyncio.subprocess.Process | None = None
    try:
        await wait_serving(api_address)
        for ns in (namespace, team):
            code, _, err = await stack.kubectl("create", "namespace", ns)
            assert code == 0, err
        started = time.monotonic()
        code, out, err = await kube.arun(
            kube.helm, "install", release, str(CHART), "--namespace", namespace, "--wait",
            "--timeout", "3m",
            "--set", f"auth.adminToken={ADMIN}",
            "--set", "migration.enabled=false",
            "--set", f"operator.peering={peering}",
            "--set", f"worker.autoscaling.minReplicas={MIN_WORKERS}",
            "--set", f"worker.autoscaling.maxReplicas={MAX_WORKERS}",
        )  # fmt: skip
        assert code == 0, f"helm install failed:\n{out}\n{err}"
        print(f"helm install --wait: {time.monotonic() - started:.1f}s")
        with stack.operator_log.open("ab") as log:
            operator = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "clockwork_operator",
                "--server", api_address,
                "--admin-token", ADMIN,
                "--peering", peering,
                "--liveness", "",
                "--status-interval", STATUS_INTERVAL,
                "--api-rate", str(API_RATE),
                "--worker-deployment", f"{namespace}/{stack.workers}",
                "--lease-name", f"{release}-clockwork-operator-autoscaler",
                "--min-workers", str(MIN_WORKERS),
                "--max-workers", str(MAX_WORKERS),
                "--target-per-worker", str(TARGET_PER_WORKER),
                "--scale-up-cooldown", "1",
                "--scale-down-cooldown", "4",
                "--scale-interval", "1",
                stdout=log, stderr=log, env={**os.environ, "KUBECONFIG": kube.kubeconfig},
            )  # fmt: skip
        yield stack
    finally:
        if operator is not None and operator.returncode is None:
            operator.terminate()
            await asyncio.wait_for(operator.wait(), 30)
        await kube.arun(kube.helm, "uninstall", release, "--namespace", namespace, "--wait")
        for ns in (team, namespace):
            await stack.kubectl("delete", "namespace", ns, "--wait=false")
        for proc in processes:
            await proc.kill()
        await sink.stop()


async def test_schedule_lifecycle_through_kubectl(stack: Stack) -> None:
    async with stack.admin() as admin:
        token = (await admin.create_tenant(stack.team)).token
    code, _, err = await stack.kubectl(
        "-n",
        stack.team,
        "create",
        "secret",
        "generic",
        "tenant-token",
        f"--from-literal=token={token}",
    )
    assert code == 0, err
    spec = {
        "schedule": {"every": "1s"},
        "target": {"http": {"url": f"{stack.sink.url}/k8s", "headers": {"X-From": "kubernetes"}}},
        "payload": '{"from": "k8s"}',
        "tenantSecretRef": {"name": "tenant-token"},
    }
    code, _, err = await stack.kubectl(
        "apply", "-f", "-", stdin=manifest("heartbeat", stack.team, spec)
    )
    assert code == 0, err

    # callbacks arrive
    got = await stack.sink.wait_for("/k8s", 2, timeout_s=60)
    assert got[0].body == b'{"from": "k8s"}' and got[0].headers["X-From"] == "kubernetes"

    # the status fills in (and is refreshed: last outcome, fired count)
    async def synced() -> bool:
        status = (await stack.schedule("heartbeat")).get("status", {})
        ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        return bool(
            status.get("state") == "ACTIVE"
            and status.get("lastOutcome") == "SUCCEEDED"
            and status.get("firedCount", 0) >= 1
            and status.get("nextFireTime")
            and ready
            and ready[0]["status"] == "True"
        )

    await eventually(synced, 30, "status with state, next fire time and last outcome")
    obj = await stack.schedule("heartbeat")
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["tenant"] == stack.team and status["schedule"] == "every 1s"
    key = status["scheduleKey"]
    assert key == f"k8s/{stack.team}/heartbeat/{obj['metadata']['uid']}"
    code, out, _ = await stack.kubectl("-n", stack.team, "get", "cws")
    assert "every 1s" in out and "ACTIVE" in out and "SUCCEEDED" in out  # printer columns
    assert len(status["upcomingFireTimes"]) == 3  # the next occurrences

    # the resource's labels reach the schedule (a label change is applied too)
    code, _, err = await stack.kubectl(
        "-n", stack.team, "label", "cws", "heartbeat", "team=payments"
    )
    assert code == 0, err

    async def labelled() -> bool:
        async with stack.admin(stack.team) as admin:
            return ("team", "payments") in (await admin.get(key)).labels

    await eventually(labelled, 30, "the resource's label on its schedule")

    # suspend: stops firing
    patch = json.dumps({"spec": {"suspend": True}})
    code, _, err = await stack.kubectl(
        "-n", stack.team, "patch", "cws", "heartbeat", "--type=merge", "-p", patch
    )
    assert code == 0, err

    async def paused() -> bool:
        return bool((await stack.schedule("heartbeat")).get("status", {}).get("state") == "PAUSED")

    await eventually(paused, 30, "state PAUSED after suspend")
    await asyncio.sleep(1.5)  # a delivery already in flight may still land
    before = len(stack.sink.at("/k8s"))
    await asyncio.sleep(3)
    assert len(stack.sink.at("/k8s")) == before, "fired while suspended"

    # resume: fires again
    patch = json.dumps({"spec": {"suspend": False}})
    code, _, err = await stack.kubectl(
        "-n", stack.team, "patch", "cws", "heartbeat", "--type=merge", "-p", patch
    )
    assert code == 0, err
    await stack.sink.wait_for("/k8s", before + 2, timeout_s=30)

    # delete: the finalizer cancels the schedule before the resource goes away
    code, _, err = await stack.kubectl(
        "-n", stack.team, "delete", "cws", "heartbeat", "--timeout=60s"
    )
    assert code == 0, err
    async with stack.admin(stack.team) as admin:
        assert (await admin.get(key)).state is ScheduleState.CANCELLED
    await asyncio.sleep(1.5)
    after = len(stack.sink.at("/k8s"))
    await asyncio.sleep(3)
    assert len(stack.sink.at("/k8s")) == after, "fired after delete"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {
                "schedule": {"every": "1s", "cron": "* * * * *"},
                "target": {"http": {"url": "https://x.test"}},
            },
            "set exactly one of cron, every, at",
        ),
        (
            {"schedule": {"every": "soon"}, "target": {"http": {"url": "https://x.test"}}},
            "spec.schedule.every",
        ),
        ({"schedule": {"every": "1s"}, "target": {}}, "set exactly one of http, kafka"),
        ({"schedule": {"every": "1s"}}, "spec.target: Required value"),
        (
            {"schedule": {"every": "1s"}, "target": {"http": {"url": "ftp://x.test"}}},
            "spec.target.http.url",
        ),
        (
            {
                "schedule": {"every": "1s"},
                "target": {"http": {"url": "https://x.test", "method": "BREW"}},
            },
            "spec.target.http.method",
        ),
    ],
)
async def test_invalid_resources_are_rejected_by_the_schema(
    stack: Stack, spec: dict[str, Any], message: str
) -> None:
    kube = stack.kube
    code, _, err = await kube.arun(
        kube.kubectl, "apply", "--dry-run=server", "-f", "-", stdin=manifest("bad", "default", spec)
    )
    assert code != 0 and message in err, err


async def test_a_spec_the_api_refuses_gets_a_failed_condition(stack: Stack) -> None:
    spec = {
        "schedule": {"cron": "61 * * * *"},  # passes the schema, refused by Clockwork
        "target": {"http": {"url": f"{stack.sink.url}/never"}},
    }
    code, _, err = await stack.kubectl(
        "apply", "-f", "-", stdin=manifest("badcron", stack.team, spec)
    )
    assert code == 0, err

    async def refused() -> bool:
        conditions = (await stack.schedule("badcron")).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["reason"] == "InvalidSpec" for c in conditions)

    await eventually(refused, 30, "Ready=False InvalidSpec")
    [ready] = [c for c in (await stack.schedule("badcron"))["status"]["conditions"]]
    assert ready["status"] == "False" and "cron" in ready["message"], ready
    code, _, err = await stack.kubectl(
        "-n", stack.team, "delete", "cws", "badcron", "--timeout=60s"
    )
    assert code == 0, err  # deleting a never-created schedule does not hang on the finalizer


async def test_workers_scale_with_load_and_back(stack: Stack) -> None:
    assert await stack.replicas() == MIN_WORKERS
    # ~40 firings/s for 20 s: needs ceil(40 / 15) = 3 workers
    now = int(time.time() * 1000)
    rate, seconds = 40, 20
    entries = [
        (
            f"load-{i}",
            ScheduleSpec(
                trigger=triggers.OnceTrigger(now + 3000 + i * 1000 // rate),
                target=HttpTarget(f"{stack.sink.url}/load"),
            ),
        )
        for i in range(rate * seconds)
    ]
    async with stack.admin(stack.team) as admin:
        for start in range(0, len(entries), 200):
            await admin.create_many(entries[start : start + 200])

    async def scaled_up() -> bool:
        return await stack.replicas() == MAX_WORKERS

    took = await eventually(scaled_up, 40, f"scale up to {MAX_WORKERS}")
    print(f"scaled up to {MAX_WORKERS} in {took:.1f}s")
    events = await stack.kube.kubectl_json(
        "-n",
        stack.namespace,
        "get",
        "events",
        "--field-selector",
        f"involvedObject.name={stack.workers}",
    )
    reasons = [(e["reason"], e["message"]) for e in events["items"]]
    assert any(r == "ScaledWorkers" and f"-> {MAX_WORKERS}" in m for r, m in reasons), reasons
    # Every round's decision reaches the API (GetClusterLoad, the dashboard's cluster
    # page), recorded just after the round's scaling.
    decisions: list[ScaleDecision | None] = []

    async def recorded() -> bool:
        async with stack.admin() as admin:
            decisions.append((await admin.cluster_load()).scale_decision)
        return decisions[-1] is not None and decisions[-1].desired_replicas == MAX_WORKERS

    await eventually(recorded, 10, f"a recorded decision of {MAX_WORKERS} workers")
    decision = decisions[-1]
    assert decision is not None and decision.last_change_ms is not None
    assert decision.deployment == f"{stack.namespace}/{stack.workers}"
    assert decision.decide_ms >= decision.last_change_ms

    await stack.sink.wait_for("/load", len(entries), timeout_s=90)

    async def scaled_down() -> bool:
        return await stack.replicas() == MIN_WORKERS

    took = await eventually(scaled_down, 60, f"scale back down to {MIN_WORKERS}")
    print(f"scaled back down in {took:.1f}s after the last firing")


@pytest.mark.timeout(max(420, 240 + FLOOD_N // API_RATE * 4))
async def test_a_flood_of_resources_is_reconciled_at_a_bounded_rate(stack: Stack) -> None:
    """FLOOD_N resources applied at once (four kubectl processes): the operator
    creates their schedules at no more than its --api-rate (checked on the schedules'
    creation times), every one reaches Ready, and deleting them all cancels every
    schedule."""
    flood = f"flood-{uuid.uuid4().hex[:6]}"
    code, _, err = await stack.kubectl("create", "namespace", flood)
    assert code == 0, err
    async with stack.admin() as admin:
        await admin.create_tenant(flood)
    items = [
        json.loads(
            manifest(
                f"f{i}",
                flood,
                {"schedule": {"every": "1h"}, "target": {"http": {"url": f"{stack.sink.url}/f"}}},
            )
        )
        for i in range(FLOOD_N)
    ]
    started = time.monotonic()

    async def apply(chunk: list[dict[str, Any]]) -> None:
        listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": chunk})
        code, _, err = await stack.kubectl("apply", "-f", "-", stdin=listed)
        assert code == 0, err

    # Four kubectl processes at once, 500 resources each time (one kubectl applies
    # a few dozen a second).
    chunks = [items[i : i + 500] for i in range(0, FLOOD_N, 500)]
    for i in range(0, len(chunks), 4):
        await asyncio.gather(*(apply(chunk) for chunk in chunks[i : i + 4]))
    applied_s = time.monotonic() - started

    async def all_ready() -> bool:
        listed = await stack.kube.kubectl_json("-n", flood, "get", "cws")
        ready = [
            c
            for obj in listed["items"]
            for c in obj.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        ]
        return len(ready) == FLOOD_N

    poll_s = max(2.0, FLOOD_N / 1000)  # each poll lists every resource
    try:
        await eventually(all_ready, 60 + FLOOD_N / API_RATE * 3, "every resource Ready", poll_s)
    except AssertionError:
        listed = await stack.kube.kubectl_json("-n", flood, "get", "cws")
        print([obj.get("status") for obj in listed["items"][:3]])
        print(stack.operator_log.read_text()[-3000:])
        raise
    converged_s = time.monotonic() - started
    async with stack.admin(flood) as admin:
        created = sorted([s.created_ms async for s in admin.list_all()])
    assert len(created) == FLOOD_N
    # In any one second: at most the burst (one second's worth) plus a second's rate,
    # and the calls in flight (16) that a slow api may answer together.
    busiest, end = 0, 0
    for i, start in enumerate(created):
        while end < len(created) and created[end] < start + 1000:
            end += 1
        busiest = max(busiest, end - i)
    print(
        f"{FLOOD_N} resources: kubectl apply {applied_s:.1f}s, all Ready {converged_s:.1f}s,"
        f" busiest second {busiest} creates (--api-rate {API_RATE})"
    )
    assert busiest <= 2 * API_RATE + 16, busiest

    started = time.monotonic()
    code, _, err = await stack.kubectl("-n", flood, "delete", "cws", "--all", "--wait=false")
    assert code == 0, err

    async def all_gone() -> bool:
        return not (await stack.kube.kubectl_json("-n", flood, "get", "cws"))["items"]

    await eventually(all_gone, 60 + FLOOD_N / API_RATE * 3, "every resource deleted", poll_s)
    print(f"all deleted {time.monotonic() - started:.1f}s after kubectl delete")
    async with stack.admin(flood) as admin:
        states = {s.state async for s in admin.list_all()}
    assert states == {ScheduleState.CANCELLED}
    await stack.kubectl("delete", "namespace", flood, "--wait=false")
