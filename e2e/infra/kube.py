"""A real Kubernetes control plane, built from source via the Go module proxy.

What controller-runtime's envtest runs, plus what turns Deployments into Pods:
its own etcd member, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok (fake nodes whose pods it marks Running and Ready). kubectl and helm are
built beside them. Nothing here needs a container runtime; the real node that runs
containers is ``node.py``, for which the apiserver listens on every local address
and advertises the pod network's gateway (so the ``kubernetes`` Service has an
endpoint pods reach), and reaches kubelets at their InternalIP.

Building (once; cached under ``<cache>/kubernetes-<version>/``, marker
``built.json``): ``go install k8s.io/kubernetes/cmd/...`` does not work because
k8s.io/kubernetes replaces its staging modules with ``./staging/...`` paths, so
a wrapper module requires k8s.io/kubernetes and replaces every staging module
the upstream ``go.mod`` lists with its published ``v0.<minor>.<patch>`` release.
All binaries come out of one ``go build`` (shared packages compile once), with
the version stamped so kubectl and helm see a real server version. kwok and helm
have no replace directives and are plain ``go install``s.

Running: one supervisor shell (the managed process; its process group holds all
five components, so stop/kill take them all down) starts the components with
their logs under ``<state>/kube/logs/``. The apiserver authenticates a static
admin token (group ``system:masters``) written into ``<state>/kube/kubeconfig``.
The readiness probe waits for ``/readyz``, the ``default`` ServiceAccount (so the
controller-manager works) and a Ready fake node (so kwok works), creating the
node on first use.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from . import podnet
from .etcd import Etcd, _go, _go_env, _run
from .process import file_lock, wait_for_exit
from .server import InfraError, LaunchSpec, ProbeError, VersionedServer

log = logging.getLogger(__name__)

KUBE_VERSION = "1.36.3"
"""Pinned: the newest Kubernetes release whose ``go.mod`` (``go 1.26.0``) builds
with the installed Go 1.26."""
KWOK_VERSION = "0.8.0"
HELM_VERSION = "3.22.0"
WRAPPER_MODULE = "local/kubebin"
MARKER = "built.json"
ADMIN_TOKEN = "clockwork-infra-admin"
NODE_NAME = "kwok-node-0"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
COMPONENT_STOP_S = 10
"""How long the supervisor waits for the components after SIGTERM before SIGKILL
(below ``Kube.stop_timeout``, so a harness stop is graceful)."""

# What kwok does to the objects it manages (its Stage API): a new fake node becomes
# Ready; a pod bound to it becomes Running and Ready; a pod being deleted goes away
# (there is no kubelet to confirm the deletion).
KWOK_STAGES = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: clockwork-node-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
      - {key: .status.phase, operator: NotIn, values: [Running]}
  next:
    statusTemplate: |
      phase: Running
      addresses:
        - {type: InternalIP, address: "{{ NodeIP }}"}
      conditions:
        - type: Ready
          status: "True"
          reason: KubeletReady
          message: kwok fake node
          lastHeartbeatTime: "{{ Now }}"
          lastTransitionTime: "{{ Now }}"
      nodeInfo:
        kubeletVersion: fake
        architecture: amd64
        operatingSystem: linux
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: clockwork-pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
      - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
      - {key: .spec.nodeName, operator: Exists}
      - {key: .status.podIP, operator: DoesNotExist}
  next:
    statusTemplate: |
      phase: Running
      hostIP: "{{ NodeIP }}"
      podIP: "{{ PodIP }}"
      startTime: "{{ Now }}"
      conditions:
        - {type: PodScheduled, status: "True", lastTransitionTime: "{{ Now }}"}
        - {type: Initialized, status: "True", lastTransitionTime: "{{ Now }}"}
        - {type: ContainersReady, status: "True", lastTransitionTime: "{{ Now }}"}
        - {type: Ready, status: "True", lastTransitionTime: "{{ Now }}"}
      containerStatuses:
      {{- range .spec.containers }}
        - name: "{{ .name }}"
          image: "{{ .image }}"
          imageID: ""
          ready: true
          started: true
          restartCount: 0
          state:
            running: {startedAt: "{{ Now }}"}
      {{- end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: clockwork-pod-delete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
      - {key: .metadata.deletionTimestamp, operator: Exists}
  next:
    finalizers: {empty: true}
    delete: true
"""

_KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
_BINARIES = (*_KUBE_BINARIES, "kwok", "helm")


class Kube(VersionedServer):
    """Ports: ``apiserver`` (published), ``etcd``/``etcd_peer`` (its own member),
    ``scheduler`` and ``kwok`` (their health/metrics listeners)."""

    name = "kube"
    env_var = "CLOCKWORK_KUBE_API"
    port_names = ("apiserver", "etcd", "etcd_peer", "scheduler", "kwok")
    ready_timeout = 180.0
    stop_timeout = 20.0
    dist_prefix = "kubernetes"
    default_version = KUBE_VERSION

    # --- layout -----------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def _etcd(self) -> Etcd:
        return Etcd(self.state_dir, self.cache_dir)

    # --- Server -------------------------------------------------------------------

    def fetch(self) -> None:
        self._etcd.fetch()
        if self._is_built():
            return
        with file_lock(self.dist_dir / ".lock"):
            if not self._is_built():
                self._build()

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        """Keys, token file and kubeconfig (kept across restarts), and the supervisor."""
        pki, logs = self.conf_dir / "pki", self.dir / "logs"
        for directory in (pki, logs, self.data_dir / "etcd"):
            directory.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "etcd").chmod(0o700)
        sa_key = pki / "sa.key"
        if not sa_key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True
            )
        tokens = self.conf_dir / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        server = f"https://{self.host}:{ports['apiserver']}"
        self.kubeconfig.write_text(admin_kubeconfig(server, ADMIN_TOKEN))
        self.kubeconfig.chmod(0o600)
        kwok_stages = self.conf_dir / "kwok-stages.yaml"
        kwok_stages.write_text(KWOK_STAGES)
        etcd_client = f"http://{self.host}:{ports['etcd']}"
        etcd_peer = f"http://{self.host}:{ports['etcd_peer']}"
        b = self.bin_dir
        commands = {
            "etcd": [
                str(self._etcd.etcd_bin),
                "--name=kube",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={etcd_client}",
                f"--advertise-client-urls={etcd_client}",
                f"--listen-peer-urls={etcd_peer}",
                f"--initial-advertise-peer-urls={etcd_peer}",
                f"--initial-cluster=kube={etcd_peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--heartbeat-interval=100",
                "--election-timeout=500",
                "--log-level=warn",
            ],
            "apiserver": [
                str(b / "kube-apiserver"),
                f"--etcd-servers={etcd_client}",
                # Every local address, advertised on the pod network's gateway: the
                # `kubernetes` Service then has an endpoint pods on the real node reach.
                "--bind-address=0.0.0.0",
                f"--advertise-address={podnet.GATEWAY}",
                f"--secure-port={ports['apiserver']}",
                # The real node is known by its pod-network address, not a host name.
                "--kubelet-preferred-address-types=InternalIP",
                f"--cert-dir={pki}",
                f"--service-cluster-ip-range={podnet.SERVICE_RANGE}",
                "--allow-privileged=true",
                "--authorization-mode=Node,RBAC",
                f"--token-auth-file={tokens}",
                f"--service-account-issuer={server}/",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                "--profiling=false",
                "--v=1",
            ],
            "controller-manager": [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={pki / 'apiserver.crt'}",
                "--leader-elect=false",
                "--secure-port=0",
                # Fake nodes send no heartbeats: without these the node would be marked
                # NotReady after its grace period and its pods evicted.
                "--controllers=*,-node-lifecycle-controller,-cloud-node-lifecycle-controller",
                "--v=1",
            ],
            "scheduler": [
                str(b / "kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--bind-address={self.host}",
                f"--secure-port={ports['scheduler']}",
                "--v=1",
            ],
            "kwok": [
                str(b / "kwok"),
                f"--config={kwok_stages}",
                f"--node-ip={podnet.KWOK_NODE_IP}",
                f"--cidr={podnet.KWOK_POD_RANGE}",
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={'='.join(KWOK_ANNOTATION)}",
                f"--server-address={self.host}:{ports['kwok']}",
            ],
        }
        return LaunchSpec(
            argv=(
                "bash",
                "-c",
                # The controllers start once the apiserver listens and has written its
                # serving certificate (the controller-manager publishes it as the root
                # CA and exits if the file is missing).
                supervisor(commands, logs, {"controller-manager": _serving(ports, pki)}),
            ),
            cwd=self.dir,
            env=clean_env(),
        )

    def probe(self, port: int, timeout: float) -> str:
        """Ready: ``/readyz``, the default ServiceAccount, and a Ready kwok node."""
        api = AdminApi(f"https://{self.host}:{port}", timeout)
        status, body = api.call("GET", "/readyz")
        if status != 200:
            raise ProbeError(f"/readyz: {status} {body[:200]!r}")
        status, _ = api.call("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        if status != 200:
            raise ProbeError("no default ServiceAccount yet (controller-manager starting)")
        status, body = api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
        if status == 404:
            status, body = api.call("POST", "/api/v1/nodes", _node())
            if status not in (200, 201, 409):
                raise ProbeError(f"creating node {NODE_NAME}: {status} {body[:300]!r}")
            raise ProbeError(f"node {NODE_NAME} created; waiting for kwok")
        node = json.loads(body)
        ready = [
            c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"
        ]
        if not ready or ready[0].get("status") != "True":
            raise ProbeError(f"node {NODE_NAME} not Ready yet")
        if node.get("spec", {}).get("taints"):
            # The not-ready taint added at registration is normally lifted by the node
            # lifecycle controller, which is off here (fake nodes send no heartbeats).
            api.call("PATCH", f"/api/v1/nodes/{NODE_NAME}", {"spec": {"taints": None}})
            raise ProbeError(f"node {NODE_NAME}: lifting its registration taint")
        version = json.loads(api.call("GET", "/version")[1]).get("gitVersion", "?")
        return f"{version}, node {NODE_NAME} ready"

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {
            self.env_var: f"https://{self.host}:{ports['apiserver']}",
            "CLOCKWORK_KUBECONFIG": str(self.kubeconfig),
            "CLOCKWORK_KUBECTL": str(self.bin_dir / "kubectl"),
            "CLOCKWORK_HELM": str(self.bin_dir / "helm"),
            "CLOCKWORK_KWOK": str(self.bin_dir / "kwok"),
            "CLOCKWORK_KUBE_VERSION": self.version,
        }

    def _stop_locked(self, timeout: float) -> None:
        """Stop the supervisor's group, then any component still running from this
        state dir: one whose supervisor died by SIGKILL alone (the OOM killer, a
        stray ``kill``) has no live group leader, which the generic stop needs."""
        super()._stop_locked(timeout)
        strays = component_pids(self.dir, {*self._binary_paths()})
        for pid in strays:
            log.warning("kube: killing orphaned component pid %d", pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            wait_for_exit(pid, 10.0)

    def _binary_paths(self) -> list[str]:
        return [str(self._etcd.etcd_bin), *(str(self.bin_dir / name) for name in _BINARIES)]

    # --- building -------------------------------------------------------------------

    def _is_built(self) -> bool:
        try:
            marker = json.loads((self.dist_dir / MARKER).read_text())
        except (OSError, ValueError):
            return False
        wanted = {"kubernetes": self.version, "kwok": KWOK_VERSION, "helm": HELM_VERSION}
        if marker.get("versions") != wanted:
            return False
        return all((self.bin_dir / name).is_file() for name in _BINARIES)

    def _build(self) -> None:
        go = _go()
        src, staging = self.dist_dir / "src", self.dist_dir / "bin.tmp"
        build_log = self.dist_dir / "build.log"
        for directory in (src, staging):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        env = _go_env(self.cache_dir / "go")
        log.info("building Kubernetes %s, kwok, helm (log: %s)", self.version, build_log)
        started = time.monotonic()
        with build_log.open("w") as out:
            build_components(self.version, _KUBE_BINARIES, src, staging, env, out)
            tools = {**env, "GOBIN": str(staging)}
            _run([go, "install", "-trimpath", "-ldflags=-s -w",
                  f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}"], src, tools, out)  # fmt: skip
            _run([go, "install", "-trimpath", "-ldflags=-s -w",
                  f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}"], src, tools, out)  # fmt: skip
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        staging.replace(self.bin_dir)
        took = time.monotonic() - started
        marker = {
            "versions": {"kubernetes": self.version, "kwok": KWOK_VERSION, "helm": HELM_VERSION},
            "binaries": list(_BINARIES),
            "build_s": round(took),
        }
        (self.dist_dir / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        log.info("built the control plane in %.1fs into %s", took, self.bin_dir)


def build_components(
    version: str,
    commands: Sequence[str],
    src: Path,
    staging: Path,
    env: Mapping[str, str],
    out: TextIO,
) -> None:
    """Build ``k8s.io/kubernetes/cmd/<command>`` for each command into ``staging``, from
    a wrapper module in ``src`` (created here) that maps every staging module to its
    published release; the binaries carry the version, as kubectl and helm expect."""
    go = _go()
    minor = version.split(".")[1]
    _run([go, "mod", "init", WRAPPER_MODULE], src, env, out)
    upstream = _upstream_go_mod(go, version, src, env)
    _run([go, "mod", "edit", f"-require=k8s.io/kubernetes@v{version}"], src, env, out)
    for module in _staging_modules(upstream):
        replace = f"-replace={module}={module}@v0.{version.split('.', 1)[1]}"
        _run([go, "mod", "edit", replace], src, env, out)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    _run([go, "get", *(f"{p}@v{version}" for p in packages)], src, env, out)
    stamp = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [
            f"-X={pkg}.gitVersion=v{version}",
            f"-X={pkg}.gitMajor=1",
            f"-X={pkg}.gitMinor={minor}",
            f"-X={pkg}.gitTreeState=clean",
        ]
    ldflags = "-ldflags=" + " ".join(stamp)
    _run([go, "build", "-trimpath", ldflags, "-o", f"{staging}/", *packages], src, env, out)


def _upstream_go_mod(go: str, version: str, cwd: Path, env: Mapping[str, str]) -> str:
    """The text of k8s.io/kubernetes's own go.mod, from the module proxy."""
    done = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise InfraError(f"kube: cannot download k8s.io/kubernetes@v{version}: {done.stderr}")
    return Path(json.loads(done.stdout)["GoMod"]).read_text()


def _staging_modules(go_mod: str) -> list[str]:
    """Modules that k8s.io/kubernetes maps to ./staging/src/... (each needs a replace)."""
    modules = []
    for line in go_mod.splitlines():
        parts = line.split()
        if "=>" in parts and parts[-1].startswith("./staging/"):
            modules.append(parts[0])
    if not modules:
        raise InfraError("kube: no staging replace directives found in k8s.io/kubernetes go.mod")
    return modules


def supervisor(commands: Mapping[str, list[str]], logs: Path, waits: Mapping[str, str]) -> str:
    """A bash script: start the components in order, each with its own log; when any of
    them exits, or the script gets SIGTERM/SIGINT, stop the others (SIGTERM, SIGKILL
    after ``COMPONENT_STOP_S``) and exit, so a dead component never leaves the rest
    running without a supervisor. ``waits`` maps a component to a bash condition polled
    before it starts (what it needs from the ones before it)."""
    lines = [
        "set -u",
        "stop() {",
        "  trap '' TERM INT",
        "  kill -TERM $(jobs -pr) 2>/dev/null",
        f"  for _ in $(seq {COMPONENT_STOP_S * 5}); do",
        '    [ -z "$(jobs -pr)" ] && break',
        "    sleep 0.2",
        "  done",
        "  kill -KILL $(jobs -pr) 2>/dev/null",
        "  wait",
        '  exit "$1"',
        "}",
        "trap 'stop 0' TERM INT",
    ]
    for name, argv in commands.items():
        if name in waits:
            lines.append(f"until {waits[name]}; do sleep 0.2; done")
        logfile = shlex.quote(str(logs / f"{name}.log"))
        lines.append(f"{shlex.join(argv)} >> {logfile} 2>&1 &")
    lines += [
        "wait -n",
        'echo "clockwork-infra: a control-plane component exited; last log lines:" >&2',
        f"tail -n 15 {shlex.quote(str(logs))}/*.log >&2",
        "stop 1",
    ]
    return "\n".join(lines) + "\n"


def _serving(ports: Mapping[str, int], pki: Path) -> str:
    cert = shlex.quote(str(pki / "apiserver.crt"))
    return f"[ -s {cert} ] && (exec 3<>/dev/tcp/127.0.0.1/{ports['apiserver']}) 2>/dev/null"


def component_pids(state: Path, binaries: set[str]) -> list[int]:
    """Processes running one of ``binaries`` with a path under ``state`` in their argv."""
    marker = f"{state}/"
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        words = [arg.decode(errors="replace") for arg in argv if arg]
        if words and words[0] in binaries and any(marker in word for word in words[1:]):
            pids.append(int(cmdline.parent.name))
    return pids


def clean_env() -> dict[str, str]:
    """Without ETCD_* (read as etcd flags) and KUBECONFIG (ours is explicit)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ETCD_") and k != "KUBECONFIG"}


def admin_kubeconfig(server: str, token: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "clockwork", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "clockwork", "context": {"cluster": "clockwork", "user": "admin"}}],
        "current-context": "clockwork",
    }
    return json.dumps(config, indent=1) + "\n"


def _node() -> dict[str, Any]:
    """A fake node for kwok: room for plenty of pods, no taints."""
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {
                KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1],
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {"type": "kwok", "kubernetes.io/hostname": NODE_NAME},
        },
        "status": {"allocatable": capacity, "capacity": capacity},
    }


class AdminApi:
    """Just enough of a Kubernetes API client for the probe (admin token, no TLS checks:
    the apiserver's certificate is self-signed at start-up)."""

    def __init__(self, base: str, timeout: float) -> None:
        self._base = base
        self._timeout = timeout
        self._context = ssl.create_default_context()
        self._context.check_hostname = False
        self._context.verify_mode = ssl.CERT_NONE

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._base + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {ADMIN_TOKEN}",
                "Content-Type": "application/merge-patch+json"
                if method == "PATCH"
                else "application/json",
            },
        )
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout, context=self._context
            ) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())


# --- module-level API -------------------------------------------------------------


def fetch(cache_dir: Path | None = None) -> Path:
    """Build the control plane, kubectl, kwok and helm into the cache; returns the bin dir."""
    server = Kube(cache_dir=cache_dir)
    server.fetch()
    return server.bin_dir
