"""The Helm chart on a real node: every pod is a container of the image built from the
project's own Dockerfile, run by containerd under a kubelet beside the test control
plane (`e2e/infra/node.py`), against the harness's Cassandra and etcd.

In order, on one installation: the image (non-root, its two entry points); `helm
install` (the migration hook Job, then the api, two workers and the operator Ready
through their own probes); a schedule created through the api Service whose signed
callback reaches a sink on the host; a `ClockworkSchedule` applied with kubectl,
suspended, resumed and deleted; a worker pod deleted and a worker container killed
while firings are due; the operator pod killed; the workers scaled up by load and back
down; `helm upgrade` to a second build while firings are due; `helm uninstall`. The
checker (`e2e/checker.py`) judges every fault: nothing acknowledged may be lost.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.coordination.etcd import cluster_status
from clockwork_svc.domain import triggers
from clockwork_svc.domain.identity import shard_of
from clockwork_svc.domain.model import ScheduleState
from clockwork_svc.domain.planning import routing_key
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.storage.cassandra import connecting, drop_keyspace_for_tests
from clockwork_svc.storage.cassandra.schema import load_layout
from e2e.checker import Report, Window
from e2e.cluster import now_ms, settle
from e2e.infra import images
from e2e.infra.node import Node
from e2e.infra.paths import default_cache_dir
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.kubernetes.conftest import CHART, KubeTools
from tests.kubernetes.support import eventually, manifest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.asyncio(loop_scope="module")]

ADMIN = "real-node-admin-" + uuid.uuid4().hex[:8]
TAG, UPGRADE_TAG, UPGRADE_VERSION = "e2e", "e2e-upgrade", "0.1.1"
MIN_WORKERS, MAX_WORKERS = 2, 3
TARGET_PER_WORKER = 15  # an integer: `--set` reads 15.0 as a string
LAG_TARGET_MS = 10_000
# The scale-down test's light tail of firings, and how long after the drained pod is gone
# its window of lag figures lasts.
TAIL_SCHEDULES = 260
LOAD_RATE, LOAD_SECONDS = 45, 25
HANDOVER_MS = 5_000
LEASE_TTL = 4
EXPIRY_MARGIN_S = 3
"""After a crash the lease runs out (up to the TTL), etcd notices (it checks expiry
every 500 ms), the survivors see the owner key go and take the shards: the nemesis
suite's bound (tests/nemesis/test_worker_faults.py)."""
TENANT = "pods"
READY_TIMEOUT_S = 240


@dataclass
class Release:
    kube: KubeTools
    node: Node
    name: str
    namespace: str
    team: str
    keyspace: str
    cluster: str
    cassandra: str
    etcd: str
    sink: RecordingSink
    """For single callbacks; each workload gets a sink of its own (`own_sink`)."""
    node_name: str
    values: list[str] = field(default_factory=list)
    api_address: str = ""
    http_url: str = ""
    shards: int = 0
    """As the migration hook laid them out (its default count)."""
    tenant_token: str = ""
    signing_secret: str = ""

    @property
    def fullname(self) -> str:
        return f"{self.name}-clockwork"

    async def kubectl(self, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        return await self.kube.arun(self.kube.kubectl, *args, stdin=stdin)

    async def helm(self, *args: str) -> tuple[int, str, str]:
        return await self.kube.arun(self.kube.helm, *args)

    async def get(self, *args: str) -> dict[str, Any]:
        return await self.kube.kubectl_json("-n", self.namespace, "get", *args)

    async def pods(self, component: str, *, terminating: bool = False) -> list[dict[str, Any]]:
        """The component's pods; those being deleted only with ``terminating``."""
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = (await self.get("pods", "-l", selector))["items"]
        return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]

    def client(self, timeout_s: float = 30.0) -> ClockworkClient:
        """The tenant's client, through the api Service."""
        settings = ClientSettings(
            self.api_address, tenant=TENANT, token=self.tenant_token, timeout_s=timeout_s
        )
        return ClockworkClient(settings)

    def admin(self) -> ClockworkClient:
        return ClockworkClient(ClientSettings(self.api_address, token=ADMIN))

    async def owners(self) -> tuple[dict[int, str], set[str]]:
        """shard -> owning worker id, and the registered worker ids (etcd)."""
        view = await cluster_status(self.etcd, self.cluster)
        return {shard: owner for shard, (owner, _) in view.owners.items()}, set(view.workers)

    async def diagnose(self) -> str:
        """Pods, events and logs of the release, for a failure message."""
        out = []
        for args in (("get", "pods", "-o", "wide"), ("get", "events", "--sort-by=.lastTimestamp")):
            _, text, err = await self.kubectl("-n", self.namespace, *args)
            out.append(f"$ kubectl {' '.join(args)}\n{text}{err}")
        for pod in (await self.get("pods"))["items"]:
            name = pod["metadata"]["name"]
            _, text, err = await self.kubectl("-n", self.namespace, "logs", name, "--tail=30")
            out.append(f"--- logs {name}\n{text}{err}")
        return "\n".join(out)[-12000:]

    @contextlib.asynccontextmanager
    async def following_logs(self, component: str) -> AsyncIterator[dict[str, Path]]:
        """`kubectl logs -f` of the component's pods (those running now) into files,
        until the block ends: the logs of a pod that is drained away stay readable."""
        folder = Path(tempfile.mkdtemp(prefix=f"logs-{component}-"))
        files: dict[str, Path] = {}
        procs = []
        for pod in await self.pods(component):
            name = pod["metadata"]["name"]
            files[name] = folder / f"{name}.log"
            with files[name].open("wb") as out:
                procs.append(
                    await asyncio.create_subprocess_exec(
                        self.kube.kubectl, "-n", self.namespace, "logs", "-f", name,
                        stdout=out, stderr=asyncio.subprocess.STDOUT, env=self.kube.env,
                    )
                )  # fmt: skip
        try:
            yield files
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()

    async def explain_lost(
        self, workload: Workload, end_ms: int, lost: list[str], logs: dict[str, Path]
    ) -> str:
        """What the store says of each lost firing (its schedule's latest executions),
        its shard and the log lines of the workers that mention a problem."""
        firings = workload.expectations(end_ms).firings
        lines = []
        async with self.client() as client:
            for delivery in lost[:10]:
                firing = firings[delivery]
                detail = await client.describe(firing.key, upcoming=0, executions=5)
                spec = detail.schedule.spec
                shard = shard_of(TENANT, routing_key(firing.key, spec), self.shards)
                runs = [(e.occurrence_ms, e.attempt, e.outcome.name) for e in detail.recent]
                lines.append(
                    f"{delivery}: {firing.key} due {firing.due_ms} shard {shard} "
                    f"next_fire_ms {detail.schedule.next_fire_ms} executions {runs}"
                )
        for name, path in logs.items():
            text = path.read_text(errors="replace") if path.exists() else ""
            noted = [x for x in text.splitlines() if '"level": "info"' not in x]
            lines.append(f"--- {name} ({len(text.splitlines())} lines), not info:")
            lines += noted[-40:]
        return "\n".join(lines)[-15000:]


@contextlib.asynccontextmanager
async def own_sink(release: Release) -> AsyncIterator[RecordingSink]:
    """A sink for one workload, so the checker sees only that workload's deliveries."""
    sink = await RecordingSink(host=release.sink.host).start()
    try:
        yield sink
    finally:
        await sink.stop()


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def wait_ready(release: Release, component: str, count: int, image: str) -> float:
    """`count` pods of `component`, all Ready on the real node, all running `image`;
    on a timeout the pods' events and logs are in the failure."""

    async def ready() -> bool:
        pods = await release.pods(component)
        return len(pods) == count and all(
            _ready(p)
            and p["spec"]["nodeName"] == release.node_name
            and p["spec"]["containers"][0]["image"] == image
            for p in pods
        )

    try:
        return await eventually(ready, READY_TIMEOUT_S, f"{count} {component} pod(s) Ready")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await release.diagnose()}") from None


def chart_values(release: Release, pod_host: str, tag: str) -> list[str]:
    """The `--set` pairs of the installation (also what the README shows, with a
    registry instead of `pullPolicy=Never`)."""
    label_key, label_value = require_server("CLOCKWORK_NODE_LABEL").split("=")
    # Small requests: every pod (and a third worker) fits on one 2-core node.
    small = json.dumps({"requests": {"cpu": "10m", "memory": "64Mi"}})
    pairs = [
        f"image.repository={images.CLOCKWORK_REPOSITORY}",
        f"image.tag={tag}",
        "image.pullPolicy=Never",
        f"cassandra.contactPoints={pod_host}:{release.cassandra.rsplit(':', 1)[1]}",
        f"cassandra.keyspace={release.keyspace}",
        "cassandra.replicationFactor=1",
        f"etcd.endpoint={pod_host}:{release.etcd.rsplit(':', 1)[1]}",
        f"etcd.clusterName={release.cluster}",
        f"etcd.leaseTtlSeconds={LEASE_TTL}",
        f"auth.adminToken={ADMIN}",
        f"worker.allowPrivateTargets={pod_host}/32",
        f"worker.autoscaling.minReplicas={MIN_WORKERS}",
        f"worker.autoscaling.maxReplicas={MAX_WORKERS}",
        f"worker.autoscaling.targetPerWorker={TARGET_PER_WORKER}",
        "worker.autoscaling.scaleUpCooldownSeconds=1",
        "worker.autoscaling.scaleDownCooldownSeconds=6",
        "worker.autoscaling.intervalSeconds=1",
        # Scale by demand only: on two shared cores a firing lag of seconds is the
        # machine (lease keepalives then go unanswered too), and a scale-down waits
        # for lag within this target.
        f"worker.autoscaling.lagTargetMs={LAG_TARGET_MS}",
        "operator.statusIntervalSeconds=2",
        "api.http.enabled=true",
        f"operator.peering=clockwork-{release.cluster}",
    ]
    escaped = label_key.replace(".", "\\.")  # a dot in a --set key is a path separator
    for part in ("api", "worker", "operator", "migration"):
        pairs += [
            f"{part}.nodeSelector.{escaped}={label_value}",
            f"{part}.tolerations[0].key={label_key}",
            f"{part}.tolerations[0].operator=Exists",
            f"{part}.tolerations[0].effect=NoSchedule",
        ]
    args = [arg for pair in pairs for arg in ("--set", pair)]
    for part in ("api", "worker", "operator", "migration"):
        args += ["--set-json", f"{part}.resources={small}"]
    return args


@pytest.fixture(scope="module")
def node() -> Node:
    require_server("CLOCKWORK_NODE")
    return Node()


@pytest.fixture(scope="module")
def image(node: Node) -> str:
    """Clockwork's image, built from the Dockerfile and loaded into the node."""
    started = time.monotonic()
    name = images.build_clockwork(TAG, default_cache_dir())
    built = time.monotonic() - started
    node.load_image(name)
    loaded = time.monotonic() - started - built
    print(f"image {name}: built in {built:.1f}s, loaded into containerd in {loaded:.1f}s")
    return name


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def release(kube: KubeTools, node: Node, image: str) -> AsyncIterator[Release]:
    pod_host = require_server("CLOCKWORK_POD_HOST")
    suffix = uuid.uuid4().hex[:8]
    sink = await RecordingSink(host=pod_host).start()
    rel = Release(
        kube=kube,
        node=node,
        name="cw",
        namespace=f"real-{suffix}",
        team=f"team-{suffix}",
        keyspace=f"pods_{suffix}",
        cluster=f"pods-{suffix}",
        cassandra=require_server("CLOCKWORK_CASSANDRA"),
        etcd=require_server("CLOCKWORK_ETCD"),
        sink=sink,
        node_name=require_server("CLOCKWORK_NODE"),
    )
    rel.values = chart_values(rel, pod_host, TAG)
    try:
        for ns in (rel.namespace, rel.team):
            code, _, err = await rel.kubectl("create", "namespace", ns)
            assert code == 0, err
        yield rel
    finally:
        await rel.helm("uninstall", rel.name, "--namespace", rel.namespace, "--wait")
        for ns in (rel.team, rel.namespace):
            await rel.kubectl("delete", "namespace", ns, "--wait=false")
        await sink.stop()
        await drop_keyspace_for_tests([rel.cassandra], rel.keyspace)


# --- 1. the image ------------------------------------------------------------------


async def test_image_is_non_root_with_both_entry_points(image: str) -> None:
    facts = images.inspect(image)
    assert facts["user"] == "10001:10001", facts
    assert images.run(image, "--version").startswith("clockwork, version ")
    assert "Reconcile ClockworkSchedule resources" in images.run(
        image, "--help", entrypoint="clockwork-operator"
    )
    assert images.run(image, entrypoint="id").startswith("uid=10001(clockwork)")
    print(f"image {image}: {int(facts['size']) / 1e6:.0f} MB")  # type: ignore[call-overload]


# --- 2. helm install --------------------------------------------------------------------


async def test_helm_install_runs_every_component_on_the_real_node(
    release: Release, image: str
) -> None:
    started = time.monotonic()
    code, out, err = await release.helm(
        "install", release.name, str(CHART), "--namespace", release.namespace,
        "--wait", "--timeout", "5m", *release.values,
    )  # fmt: skip
    if code != 0:
        raise AssertionError(f"helm install failed:\n{out}\n{err}\n{await release.diagnose()}")
    # The migration hook ran in a pod on the node, against the harness's Cassandra:
    cluster, session = await connecting.connect([release.cassandra], timeout_s=30.0)
    try:
        layout = await load_layout(session, release.keyspace)
    finally:
        await connecting.shutdown(cluster)
    assert layout is not None and layout.shard_count > 0, layout
    release.shards = layout.shard_count
    await wait_ready(release, "api", 2, image)
    await wait_ready(release, "worker", MIN_WORKERS, image)  # the operator scaled 1 -> 2
    await wait_ready(release, "operator", 1, image)
    print(f"helm install to every pod Ready: {time.monotonic() - started:.1f}s")

    # Both workers registered in etcd and share every shard.
    workers = {p["metadata"]["name"] for p in await release.pods("worker")}

    async def shared() -> bool:
        owners, registered = await release.owners()
        owning = {owner.rsplit("-", 2)[0] for owner in owners.values()}
        return len(owners) == layout.shard_count and owning == workers == {
            w.rsplit("-", 2)[0] for w in registered
        }

    await eventually(shared, 30, "both worker pods own shards")
    service = await release.get("service", f"{release.fullname}-api")
    release.api_address = f"{service['spec']['clusterIP']}:7070"
    release.http_url = f"http://{service['spec']['clusterIP']}:7080"
    async with release.admin() as admin:
        created = await admin.create_tenant(TENANT)
    release.tenant_token, release.signing_secret = created.token, created.signing_secret


# --- 3. schedules through the Service and through kubectl ---------------------------------


async def test_a_schedule_created_through_the_service_calls_back_signed(release: Release) -> None:
    spec = ScheduleSpec(
        trigger=triggers.OnceTrigger(now_ms() + 1500),
        target=HttpTarget(f"{release.sink.url}/signed"),
        payload=b'{"hello": "pods"}',
    )
    async with release.client() as client:
        await client.create("signed-1", spec)
    [got] = await release.sink.wait_for("/signed", 1, timeout_s=30)
    assert got.body == b'{"hello": "pods"}'
    msg_id, stamp = got.headers["webhook-id"], got.headers["webhook-timestamp"]
    key = base64.b64decode(release.signing_secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{stamp}.".encode() + got.body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert expected in got.headers["webhook-signature"].split(), got.headers


async def test_the_http_api_answers_through_the_service(release: Release) -> None:
    """The JSON API on the Service's `http` port: a schedule created over HTTP calls
    back, and reads back through the same port."""
    headers = {"Authorization": f"Bearer {release.tenant_token}"}
    when = datetime.fromtimestamp((now_ms() + 1500) / 1000, UTC).isoformat()
    body = {
        "key": "over-http",
        "spec": {
            "once": {"at": when.replace("+00:00", "Z")},
            "http": {"url": f"{release.sink.url}/over-http"},
            "payload": base64.b64encode(b'{"via": "http"}').decode(),
        },
    }
    async with aiohttp.ClientSession(release.http_url) as session:
        async with session.post("/v1/schedules", json=body, headers=headers) as reply:
            assert reply.status == 200, await reply.text()
        [got] = await release.sink.wait_for("/over-http", 1, timeout_s=30)
        assert got.body == b'{"via": "http"}'
        async with session.get("/v1/schedules/over-http", headers=headers) as reply:
            assert reply.status == 200
            assert (await reply.json())["key"] == "over-http"
        async with session.get("/v1/schedules/over-http") as reply:
            assert reply.status == 401


async def apply_heartbeat(release: Release, name: str, path: str) -> dict[str, Any]:
    """Apply a 1 s ClockworkSchedule; wait for callbacks and a synced status."""
    spec = {
        "schedule": {"every": "1s"},
        "target": {"http": {"url": f"{release.sink.url}{path}"}},
        "payload": '{"from": "k8s"}',
        "tenantSecretRef": {"name": "tenant-token"},
    }
    code, _, err = await release.kubectl(
        "apply", "-f", "-", stdin=manifest(name, release.team, spec)
    )
    assert code == 0, err
    await release.sink.wait_for(path, 2, timeout_s=60)

    async def synced() -> bool:
        status = (await release.kube.kubectl_json("-n", release.team, "get", "cws", name)).get(
            "status", {}
        )
        return bool(
            status.get("state") == "ACTIVE"
            and status.get("lastOutcome") == "SUCCEEDED"
            and status.get("nextFireTime")
            and status.get("firedCount", 0) >= 1
        )

    await eventually(synced, 60, f"{name}: status with next fire time and last outcome")
    return await release.kube.kubectl_json("-n", release.team, "get", "cws", name)


async def test_a_clockwork_schedule_is_reconciled_by_the_operator_pod(release: Release) -> None:
    code, _, err = await release.kubectl(
        "-n", release.team, "create", "secret", "generic", "tenant-token",
        f"--from-literal=token={release.tenant_token}", f"--from-literal=tenant={TENANT}",
    )  # fmt: skip
    assert code == 0, err
    obj = await apply_heartbeat(release, "heartbeat", "/cws")
    key = obj["status"]["scheduleKey"]

    async def state(want: str) -> bool:
        cws = await release.kube.kubectl_json("-n", release.team, "get", "cws", "heartbeat")
        return bool(cws.get("status", {}).get("state") == want)

    async def patch_suspend(value: bool) -> None:
        code, _, err = await release.kubectl(
            "-n", release.team, "patch", "cws", "heartbeat", "--type=merge",
            "-p", json.dumps({"spec": {"suspend": value}}),
        )  # fmt: skip
        assert code == 0, err

    await patch_suspend(True)
    await eventually(lambda: state("PAUSED"), 30, "PAUSED after suspend")
    await asyncio.sleep(1.5)  # a delivery already in flight may still land
    before = len(release.sink.at("/cws"))
    await asyncio.sleep(3)
    assert len(release.sink.at("/cws")) == before, "fired while suspended"
    await patch_suspend(False)
    await release.sink.wait_for("/cws", before + 2, timeout_s=30)
    code, _, err = await release.kubectl(
        "-n", release.team, "delete", "cws", "heartbeat", "--timeout=60s"
    )
    assert code == 0, err
    async with release.client() as client:
        assert (await client.get(key)).state is ScheduleState.CANCELLED
    await asyncio.sleep(1.5)
    after = len(release.sink.at("/cws"))
    await asyncio.sleep(3)
    assert len(release.sink.at("/cws")) == after, "fired after delete"


# --- 4. faults on pods ---------------------------------------------------------------------


async def test_a_deleted_worker_pod_is_taken_over_and_replaced(release: Release) -> None:
    async with own_sink(release) as sink:
        await _delete_a_worker_pod(release, sink)


async def due_workload(
    release: Release, sink: RecordingSink, seed: int, count: int = 150, span_ms: int = 20_000
) -> tuple[Workload, int]:
    """`count` schedules with firings due from 3 s on until `span_ms` from now, created
    and under way (4 s later); returns the workload and the end of its firings."""
    t0 = now_ms()
    workload = Workload(seed=seed, target=sink.url, prefix=f"fault{seed}")
    planned = workload.generate(count, t0 + 3_000, t0 + span_ms)
    async with release.client() as client:
        await workload.create(client, planned)
    await asyncio.sleep(4)
    return workload, t0 + span_ms


async def settle_until(
    release: Release,
    workload: Workload,
    sink: RecordingSink,
    end_ms: int,
    windows: list[Window],
    until_ms: int,
) -> Report:
    """`settle` judging only the firings due before `until_ms` (the end of the fault
    and a margin); the schedules' later firings are then cancelled, not waited for."""
    report = await settle(release, workload, sink, end_ms, windows, until_ms=until_ms)
    if until_ms < end_ms:
        async with release.client() as client:
            await workload.cancel(client, list(workload.created))
    return report


async def _delete_a_worker_pod(release: Release, sink: RecordingSink) -> None:
    workload, end = await due_workload(release, sink, seed=21)
    victim = (await release.pods("worker"))[0]["metadata"]["name"]
    survivors = {p["metadata"]["name"] for p in await release.pods("worker")} - {victim}
    start = now_ms()
    code, _, err = await release.kubectl(
        "-n", release.namespace, "delete", "pod", victim, "--wait=false"
    )
    assert code == 0, err

    async def taken_over() -> bool:
        owners, _ = await release.owners()
        return len(owners) == release.shards and not any(
            o.startswith(victim) for o in owners.values()
        )

    took = await eventually(taken_over, LEASE_TTL + 10, "the victim's shards taken over", 0.1)
    window = Window("kubectl delete pod (worker)", start, now_ms())
    print(f"worker pod deleted: its shards owned by others after {took:.2f}s")
    assert took <= LEASE_TTL, took  # released on SIGTERM: no lease has to expire
    report = await settle(release, workload, sink, end, [window])
    assert_no_loss("kubectl delete pod (worker)", report, duplicates_allowed=True)

    # The Deployment's replacement starts, registers and gets shards.
    image = f"{images.CLOCKWORK_REPOSITORY}:{TAG}"
    await wait_ready(release, "worker", MIN_WORKERS, image)
    replacement = {p["metadata"]["name"] for p in await release.pods("worker")} - survivors
    assert len(replacement) == 1 and victim not in replacement, replacement

    async def replacement_owns() -> bool:
        owners, _ = await release.owners()
        return any(o.startswith(next(iter(replacement))) for o in owners.values())

    await eventually(replacement_owns, 30, "the replacement worker owns shards")


async def test_a_crashed_worker_container_is_taken_over_within_the_lease_ttl(
    release: Release,
) -> None:
    """SIGKILL of the worker process in its container (no shard handed back): the
    other worker takes its shards once the lease expires; the kubelet restarts it."""
    async with own_sink(release) as sink:
        await _crash_a_worker(release, sink)


async def _crash_a_worker(release: Release, sink: RecordingSink) -> None:
    workload, end = await due_workload(release, sink, seed=25)
    pod = (await release.pods("worker"))[0]
    name = pod["metadata"]["name"]
    [status] = pod["status"]["containerStatuses"]
    owners, _ = await release.owners()
    [victim] = {o for o in owners.values() if o.startswith(name)}
    start = now_ms()
    release.node.kill_container(status["containerID"].removeprefix("containerd://"))

    async def taken_over() -> bool:
        owners, _ = await release.owners()
        return len(owners) == release.shards and victim not in owners.values()

    took = await eventually(taken_over, LEASE_TTL + 10, "the crashed worker's shards", 0.1)
    window = Window("kill -9 worker container", start, now_ms())
    print(f"worker container killed: its shards owned by others after {took:.2f}s")
    assert took <= LEASE_TTL + EXPIRY_MARGIN_S, took
    report = await settle(release, workload, sink, end, [window])
    assert_no_loss("kill -9 worker container", report, duplicates_allowed=True)

    async def restarted() -> bool:
        [fresh] = [p for p in await release.pods("worker") if p["metadata"]["name"] == name]
        [state] = fresh["status"]["containerStatuses"]
        return bool(state["restartCount"] >= 1 and _ready(fresh))

    await eventually(restarted, 60, "the kubelet restarted the worker container")

    async def rejoined() -> bool:
        owners, _ = await release.owners()
        return any(o.startswith(name) and o != victim for o in owners.values())

    await eventually(rejoined, 30, "the restarted worker owns shards again")


async def test_a_killed_operator_pod_is_replaced_and_carries_on(release: Release) -> None:
    [operator] = await release.pods("operator")
    name = operator["metadata"]["name"]
    code, _, err = await release.kubectl(
        "-n", release.namespace, "delete", "pod", name, "--grace-period=0", "--force"
    )
    assert code == 0, err
    image = f"{images.CLOCKWORK_REPOSITORY}:{TAG}"
    took = await wait_ready(release, "operator", 1, image)
    [fresh] = await release.pods("operator")
    assert fresh["metadata"]["name"] != name
    print(f"operator pod replaced and Ready in {took:.1f}s")
    obj = await apply_heartbeat(release, "after-operator-restart", "/after-restart")
    code, _, err = await release.kubectl(
        "-n", release.team, "delete", "cws", "after-operator-restart", "--timeout=60s"
    )
    assert code == 0, err
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


# --- 5. autoscaling with real pods ---------------------------------------------------------


async def test_workers_scale_up_with_load_and_back_down_losing_nothing(release: Release) -> None:
    async with (
        own_sink(release) as load_sink,
        own_sink(release) as tail_sink,
        contextlib.AsyncExitStack() as stack,
    ):
        await _scale_up_and_down(release, load_sink, tail_sink, stack)


async def _scale_up_and_down(
    release: Release,
    load_sink: RecordingSink,
    tail_sink: RecordingSink,
    stack: contextlib.AsyncExitStack,
) -> None:
    deployment = f"{release.fullname}-worker"

    async def replicas(want: int) -> bool:
        return bool((await release.get("deploy", deployment))["spec"]["replicas"] == want)

    assert await replicas(MIN_WORKERS)
    # ~45 firings/s for 25 s: ceil(45 / 15) = 3 workers; and a light tail of firings
    # due until 75 s after the load, while the third worker is drained away and its
    # shards move to the other two (light enough for the autoscaler to go back to 2).
    # The tail is judged until its window ends; the rest of it is cancelled.
    t0 = now_ms()
    rate, seconds = LOAD_RATE, LOAD_SECONDS
    end = t0 + 3_000 + seconds * 1_000
    tail_end = end + 75_000
    load = Workload(seed=22, target=load_sink.url, prefix="scale", mix=(1.0, 0.0, 0.0))
    tail = Workload(seed=23, target=tail_sink.url, prefix="drain")
    async with release.client() as client:
        await load.create(client, load.generate(rate * seconds, t0 + 3_000, end))
        await tail.create(client, tail.generate(TAIL_SCHEDULES, t0 + 3_000, tail_end))
    took = await eventually(lambda: replicas(MAX_WORKERS), 60, f"scaled to {MAX_WORKERS}")
    print(f"scaled up to {MAX_WORKERS} after {took:.1f}s")
    image = f"{images.CLOCKWORK_REPOSITORY}:{TAG}"
    await wait_ready(release, "worker", MAX_WORKERS, image)
    logs = await stack.enter_async_context(release.following_logs("worker"))
    workers = {p["metadata"]["name"] for p in await release.pods("worker")}

    async def all_own() -> bool:
        owners, _ = await release.owners()
        return {o.rsplit("-", 2)[0] for o in owners.values()} == workers

    await eventually(all_own, 30, "the new worker pod owns shards")

    try:
        await eventually(lambda: replicas(MIN_WORKERS), 120, f"back to {MIN_WORKERS}", 0.2)
    except AssertionError as exc:
        async with release.client() as client:
            seen = await client.cluster_load()
        raise AssertionError(f"{exc}; the load the autoscaler last saw: {seen}") from exc
    down = now_ms()
    print(f"scaled back down {(down - end) / 1000:.1f}s after the load")

    async def drained() -> bool:
        return len(await release.pods("worker", terminating=True)) == MIN_WORKERS

    # Until the kubelet confirms the drained pod's end: its SIGTERM path has run.
    took = await eventually(drained, 60, "the drained worker pod gone", 0.2)
    print(f"the drained worker pod was gone {took:.1f}s after the scale-down")
    # From the scale-down until the survivors have held the drained worker's shards
    # for a few seconds: the firings due while its shards change hands.
    window = Window("scale down (drain and handover)", down, now_ms() + HANDOVER_MS)
    assert window.end_ms < tail_end, "the scale-down came after the tail of firings"
    report = await settle(release, load, load_sink, end, [Window("scaled up", t0, end)])
    if report.lost:
        print(await release.explain_lost(load, end, report.lost, logs))
    assert_no_loss("scale up", report, duplicates_allowed=False)
    judged_until = window.end_ms + 1_000
    report = await settle_until(release, tail, tail_sink, tail_end, [window], judged_until)
    if report.lost:
        print(await release.explain_lost(tail, judged_until, report.lost, logs))
    assert_no_loss("scale down", report, duplicates_allowed=False)
    assert report.windows[0].due > 0, "no firing was due while the worker drained"


# --- 6. helm upgrade to a new image --------------------------------------------------------


async def test_helm_upgrade_rolls_every_pod_to_a_new_image_losing_nothing(
    release: Release, node: Node
) -> None:
    new_image = images.build_clockwork(UPGRADE_TAG, default_cache_dir(), version=UPGRADE_VERSION)
    node.load_image(new_image)
    async with own_sink(release) as sink:
        await _upgrade(release, sink, new_image)


async def _upgrade(release: Release, sink: RecordingSink, new_image: str) -> None:
    workload, end = await due_workload(release, sink, seed=24, count=200, span_ms=45_000)
    start = now_ms()
    values = chart_values(release, release.sink.host, UPGRADE_TAG)
    code, out, err = await release.helm(
        "upgrade", release.name, str(CHART), "--namespace", release.namespace,
        "--wait", "--timeout", "5m", *values,
    )  # fmt: skip
    if code != 0:
        raise AssertionError(f"helm upgrade failed:\n{out}\n{err}\n{await release.diagnose()}")
    for component, count in (("api", 2), ("worker", MIN_WORKERS), ("operator", 1)):
        await wait_ready(release, component, count, new_image)
    rolled = now_ms()
    print(f"helm upgrade: every pod on {new_image} after {(rolled - start) / 1000:.1f}s")
    code, out, err = await release.kubectl(
        "-n", release.namespace, "exec", f"deploy/{release.fullname}-api", "--",
        "clockwork", "--version",
    )  # fmt: skip
    assert code == 0 and out.strip().endswith(UPGRADE_VERSION), (out, err)
    window = Window("helm upgrade (rolling)", start, rolled)
    report = await settle_until(release, workload, sink, end, [window], rolled + 5_000)
    assert_no_loss("helm upgrade", report, duplicates_allowed=True)


# --- 7. helm uninstall -----------------------------------------------------------------------


async def test_helm_uninstall_removes_the_release_and_keeps_crd_and_data(release: Release) -> None:
    code, _, err = await release.helm(
        "uninstall", release.name, "--namespace", release.namespace, "--wait"
    )
    assert code == 0, err
    for kind in ("deploy", "service", "pdb", "secret", "serviceaccount", "role", "rolebinding"):
        items = await release.get(kind, "-l", f"app.kubernetes.io/instance={release.name}")
        assert items["items"] == [], (kind, [i["metadata"]["name"] for i in items["items"]])

    async def pods_gone() -> bool:
        return not (await release.get("pods"))["items"]

    await eventually(pods_gone, 60, "every pod of the release gone")
    code, _, err = await release.kubectl("get", "crd", "clockworkschedules.clockwork.io")
    assert code == 0, f"the CRD must survive uninstall: {err}"
    cluster, session = await connecting.connect([release.cassandra], timeout_s=30.0)
    try:
        assert await load_layout(session, release.keyspace) is not None, "data must survive"
    finally:
        await connecting.shutdown(cluster)


def assert_no_loss(name: str, report: Report, *, duplicates_allowed: bool) -> None:
    print(f"{name}: {report.summary()}")
    for line in report.table().splitlines():
        print(f"  {line}")
    assert not report.lost, f"{name}: lost {report.lost[:20]}"
    assert not report.unexpected, f"{name}: unexpected {report.unexpected[:20]}"
    if not duplicates_allowed:
        assert not report.duplicated, f"{name}: duplicated {report.duplicated}"
