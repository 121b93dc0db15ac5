"""A real Kubernetes node beside the test control plane: pods run as containers.

The kwok node of ``kube.py`` never starts a container. This one does: containerd
(Debian's, with runc), kubelet and kube-proxy built from the same Kubernetes release
as the control plane, the bridge CNI plugins, and CoreDNS for the cluster's names.
The chart's pods run here from images built from the project's own Dockerfile
(``images.py``) and imported into containerd (no registry is involved).

Keeping the two kinds of node apart: this node is labelled ``clockwork.io/node=real``
and tainted ``clockwork.io/node=real:NoSchedule``, so only pods that ask for it (a
node selector and a toleration) land here and the kwok tests' pods stay fake.

What the host needs, beyond the packages (``containerd runc containernetworking-plugins
buildah podman debootstrap iptables conntrack``): root, cgroups (v1 or v2), and the
bridge netfilter sysctls. The settings without which nothing starts here:

* containerd's CRI plugin with ``restrict_oom_score_adj`` (the sandbox's
  oom_score_adj -998 needs a capability this kind of host does not grant), the
  overlayfs snapshotter, cgroupfs, and a pause image of our own;
* kubelet with ``failCgroupV1: false`` and the cgroupfs driver;
* the pod network of ``podnet.py``: the apiserver advertises its gateway.

Running: one supervisor shell (``kube.supervisor``) starts containerd, imports the
pause image, then kubelet, kube-proxy and CoreDNS, each logging to
``<state>/node/logs/``. The probe waits until the node is Ready, lifts its
registration ``not-ready`` taint (the node-lifecycle controller is off for the kwok
node's sake) and checks that CoreDNS answers. Stopping kills every container of the
node first (they live outside the supervisor's process group), then the components,
then unmounts what the kubelet and containerd mounted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from . import images, podnet
from .etcd import _go, _go_env, _run
from .kube import (
    ADMIN_TOKEN,
    KUBE_VERSION,
    AdminApi,
    Kube,
    admin_kubeconfig,
    build_components,
    clean_env,
    component_pids,
    supervisor,
)
from .process import file_lock, wait_for_exit
from .server import InfraError, LaunchSpec, ProbeError, VersionedServer

log = logging.getLogger(__name__)

NODE_NAME = "clockwork-node-0"
NODE_LABEL = ("clockwork.io/node", "real")
COREDNS_VERSION = "1.15.0"
CLUSTER_DOMAIN = "cluster.local"
MARKER = "built.json"
CNI_BIN_DIR = Path("/usr/lib/cni")
_BINARIES = ("kubelet", "kube-proxy", "coredns")
_TOOLS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables",
          "conntrack": "conntrack", "podman": "podman", "buildah": "buildah",
          "debootstrap": "debootstrap"}  # fmt: skip


class Node(VersionedServer):
    """Ports: ``kubelet`` (its API, on the pod gateway), ``kubelet_health``,
    ``proxy_health``, ``proxy_metrics``, ``dns_health`` (on 127.0.0.1). CoreDNS
    serves on the gateway's port 53."""

    name = "node"
    env_var = "CLOCKWORK_NODE"
    port_names = ("kubelet", "kubelet_health", "proxy_health", "proxy_metrics", "dns_health")
    ready_timeout = 180.0
    stop_timeout = 40.0
    dist_prefix = "node"
    default_version = KUBE_VERSION

    # --- layout -----------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "run" / "containerd.sock"

    @property
    def kubeconfig(self) -> Path:
        return self.conf_dir / "kubeconfig"

    @property
    def _kube(self) -> Kube:
        return Kube(self.state_dir, self.cache_dir, version=self.version)

    # --- Server -----------------------------------------------------------------

    def fetch(self) -> None:
        missing = sorted({pkg for tool, pkg in _TOOLS.items() if shutil.which(tool) is None})
        if missing:
            raise InfraError(
                f"node: missing Debian packages {missing} (apt-get install {' '.join(missing)})"
            )
        self._kube.fetch()
        if not self._is_built():
            with file_lock(self.dist_dir / ".lock"):
                if not self._is_built():
                    self._build()
        images.pause_archive(self.cache_dir)
        images.ensure_base_image(self.cache_dir)

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        kube = self._kube.attach()
        if kube is None:
            raise InfraError("node: the control plane (`kube`) is not running; start it first")
        podnet.ensure()
        self._cleanup()  # what a crashed earlier run may have left
        logs = self.dir / "logs"
        for directory in (logs, self.containerd_socket.parent, self.data_dir / "kubelet"):
            directory.mkdir(parents=True, exist_ok=True)
        apiserver = f"https://127.0.0.1:{kube.ports['apiserver']}"
        self.kubeconfig.write_text(admin_kubeconfig(apiserver, ADMIN_TOKEN))
        self.kubeconfig.chmod(0o600)
        containerd_conf = self.conf_dir / "containerd.toml"
        containerd_conf.write_text(self._containerd_toml())
        (self.conf_dir / "cni").mkdir(exist_ok=True)
        (self.conf_dir / "cni" / "10-clockwork.conflist").write_text(self._cni_conflist())
        kubelet_conf = self.conf_dir / "kubelet.yaml"
        kubelet_conf.write_text(json.dumps(self._kubelet_config(ports), indent=1) + "\n")
        resolv = self.conf_dir / "resolv.conf"
        resolv.write_text(f"nameserver {podnet.GATEWAY}\n")
        corefile = self.conf_dir / "Corefile"
        corefile.write_text(self._corefile(ports))
        b = self.bin_dir
        sock = str(self.containerd_socket)
        pause = images.pause_archive(self.cache_dir)
        commands = {
            "containerd": [_containerd(), f"--config={containerd_conf}"],
            "kubelet": [
                str(b / "kubelet"),
                f"--config={kubelet_conf}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.data_dir / 'kubelet'}",
                f"--cert-dir={self.data_dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={podnet.GATEWAY}",
                f"--node-labels={'='.join(NODE_LABEL)}",
                f"--register-with-taints={'='.join(NODE_LABEL)}:NoSchedule",
                "--v=1",
            ],
            "kube-proxy": [
                str(b / "kube-proxy"),
                f"--kubeconfig={self.kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={podnet.SUBNET}",
                f"--healthz-bind-address=127.0.0.1:{ports['proxy_health']}",
                f"--metrics-bind-address=127.0.0.1:{ports['proxy_metrics']}",
                # Leave the host's conntrack table size alone.
                "--conntrack-max-per-core=0",
                "--v=1",
            ],
            "coredns": [str(b / "coredns"), "-conf", str(corefile)],
        }
        waits = {
            # containerd answers and holds the sandbox image before the kubelet asks.
            "kubelet": f"ctr --address {shlex.quote(sock)} -n k8s.io images import "
            f"{shlex.quote(str(pause))} >/dev/null 2>&1",
        }
        return LaunchSpec(
            argv=("bash", "-c", supervisor(commands, logs, waits)),
            cwd=self.dir,
            env={**clean_env(), "PATH": f"{CNI_BIN_DIR}:{os.environ.get('PATH', '')}"},
        )

    def probe(self, port: int, timeout: float) -> str:
        """Ready: the node is Ready without the registration taint, CoreDNS answers."""
        kube = self._kube.attach()
        if kube is None:
            raise ProbeError("control plane not running")
        api = AdminApi(f"https://127.0.0.1:{kube.ports['apiserver']}", timeout)
        status, body = api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
        if status != 200:
            raise ProbeError(f"node {NODE_NAME} not registered yet ({status})")
        node = json.loads(body)
        ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        if not ready or ready[0].get("status") != "True":
            reason = ready[0].get("message", "") if ready else "no Ready condition"
            raise ProbeError(f"node {NODE_NAME} not Ready: {reason}")
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") == NODE_LABEL[0]]
        if len(kept) != len(taints):
            api.call("PATCH", f"/api/v1/nodes/{NODE_NAME}", {"spec": {"taints": kept}})
            raise ProbeError(f"node {NODE_NAME}: lifting its registration taint")
        _resolve_kubernetes_service(timeout)
        info = node["status"].get("nodeInfo", {})
        return f"{info.get('kubeletVersion')}, {info.get('containerRuntimeVersion')}"

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {
            self.env_var: NODE_NAME,
            "CLOCKWORK_NODE_LABEL": "=".join(NODE_LABEL),
            "CLOCKWORK_NODE_CONTAINERD": str(self.containerd_socket),
            # Where pods reach this machine: the apiserver, Cassandra, etcd, sinks.
            "CLOCKWORK_POD_HOST": podnet.GATEWAY,
        }

    def _stop_locked(self, timeout: float) -> None:
        """Kill the node's containers (they live outside the supervisor's group), stop
        the components, then undo mounts, sandboxes' namespaces and kube-proxy's rules."""
        self._kill_containers()
        super()._stop_locked(timeout)
        self._cleanup()

    def destroy(self, timeout: float | None = None) -> None:
        super().destroy(timeout)
        podnet.remove()

    # --- images -------------------------------------------------------------------

    def load_image(self, image: str) -> None:
        """Export ``image`` from buildah's store and import it into the node's containerd."""
        safe = image.replace("/", "_").replace(":", "_")  # a colon would end the archive path
        archive = images.images_dir(self.cache_dir) / f"{safe}.oci.tar"
        images.export(image, archive)
        try:
            done = subprocess.run(
                ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", "images",
                 "import", "--base-name", image.rsplit(":", 1)[0], str(archive)],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
        finally:
            archive.unlink(missing_ok=True)
        if done.returncode != 0:
            raise InfraError(f"node: importing {image} failed: {done.stderr.strip()}")

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process, as a crash would (the kubelet restarts it)."""
        done = subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", "tasks", "kill",
             "-s", "SIGKILL", container_id],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if done.returncode != 0:
            raise InfraError(f"node: killing container {container_id}: {done.stderr.strip()}")

    # --- configuration ----------------------------------------------------------------

    def _containerd_toml(self) -> str:
        cri = '[plugins."io.containerd.grpc.v1.cri"]'
        return f"""\
version = 2
root = "{self.data_dir / "containerd"}"
state = "{self.dir / "run" / "containerd-state"}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
{cri}
  sandbox_image = "{images.PAUSE_IMAGE}"
  # The pause container's oom_score_adj (-998) needs a capability this host lacks.
  restrict_oom_score_adj = true
  enable_selinux = false
{cri[:-1]}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
{cri[:-1]}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
{cri[:-1]}.containerd.runtimes.runc.options]
  SystemdCgroup = false
{cri[:-1]}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{self.conf_dir / "cni"}"
"""

    def _cni_conflist(self) -> str:
        conf = {
            "cniVersion": "0.4.0",
            "name": "clockwork",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": podnet.BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": podnet.SUBNET, "gateway": podnet.GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.data_dir / "cni-ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        return json.dumps(conf, indent=1) + "\n"

    def _kubelet_config(self, ports: Mapping[str, int]) -> dict[str, object]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": podnet.GATEWAY,
            "port": ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": ports["kubelet_health"],
            # The apiserver reaches the kubelet (logs, exec) without a client
            # certificate; the kubelet listens only on the pod gateway.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "clusterDNS": [podnet.GATEWAY],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(self.conf_dir / "resolv.conf"),
            # The images cannot be pulled again: never collect them, evict only when
            # the disk is all but full.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "maxPods": 60,
            "serializeImagePulls": False,
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s",
        }

    def _corefile(self, ports: Mapping[str, int]) -> str:
        # No `forward`: a name outside the cluster gets no answer from here, so
        # nothing a pod resolves leads off this machine.
        return f"""\
.:53 {{
    bind {podnet.GATEWAY}
    errors
    health 127.0.0.1:{ports["dns_health"]}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig} clockwork
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""

    # --- stopping ---------------------------------------------------------------------

    def _kill_containers(self) -> None:
        """SIGKILL every task in the node's containerd, while it still answers."""
        if self.containerd_socket.exists():
            ctr = ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", "tasks"]
            listed = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, timeout=30)
            for task in listed.stdout.split():
                subprocess.run([*ctr, "kill", "-s", "SIGKILL", task], capture_output=True)

    def _cleanup(self) -> None:
        """Kill what is left of the node (components whose supervisor died, containerd's
        shims), unmount what lives under the node's directory, delete the sandboxes'
        network namespaces and kube-proxy's rules; leftovers of a crash included."""
        binaries = {str(self.bin_dir / name) for name in _BINARIES} | {_containerd()}
        strays = component_pids(self.dir, binaries) + _shims(self.containerd_socket)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            wait_for_exit(pid, 5.0)
        prefix = f"{self.dir}/"
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        for netns in Path("/var/run/netns").glob("cni-*"):
            subprocess.run(["ip", "netns", "delete", netns.name], capture_output=True)
        proxy = self.bin_dir / "kube-proxy"
        if proxy.is_file():
            subprocess.run([str(proxy), "--cleanup"], capture_output=True, timeout=60)

    # --- building -----------------------------------------------------------------------

    def _is_built(self) -> bool:
        try:
            marker = json.loads((self.dist_dir / MARKER).read_text())
        except (OSError, ValueError):
            return False
        wanted = {"kubernetes": self.version, "coredns": COREDNS_VERSION}
        return marker.get("versions") == wanted and all(
            (self.bin_dir / name).is_file() for name in _BINARIES
        )

    def _build(self) -> None:
        src, staging = self.dist_dir / "src", self.dist_dir / "bin.tmp"
        for directory in (src, staging):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        env = _go_env(self.cache_dir / "go")
        build_log = self.dist_dir / "build.log"
        log.info("building kubelet, kube-proxy %s and CoreDNS (log: %s)", self.version, build_log)
        started = time.monotonic()
        with build_log.open("w") as out:
            build_components(self.version, ("kubelet", "kube-proxy"), src, staging, env, out)
            tools = {**env, "GOBIN": str(staging)}
            _run([_go(), "install", "-trimpath", "-ldflags=-s -w",
                  f"github.com/coredns/coredns@v{COREDNS_VERSION}"], src, tools, out)  # fmt: skip
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        staging.replace(self.bin_dir)
        took = time.monotonic() - started
        marker = {
            "versions": {"kubernetes": self.version, "coredns": COREDNS_VERSION},
            "build_s": round(took),
        }
        (self.dist_dir / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        log.info("built the node's binaries in %.1fs into %s", took, self.bin_dir)


def _containerd() -> str:
    return shutil.which("containerd") or "/usr/bin/containerd"


def _shims(socket_path: Path) -> list[int]:
    """The containerd shims serving the node's containerd (by their ``-address``)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv[0].endswith("containerd-shim-runc-v2") and str(socket_path) in argv:
            pids.append(int(cmdline.parent.name))
    return pids


def _resolve_kubernetes_service(timeout: float) -> None:
    """A DNS query for the ``kubernetes`` Service, answered by CoreDNS on the gateway."""
    name = f"kubernetes.default.svc.{CLUSTER_DOMAIN}"
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        query += bytes([len(label)]) + label.encode()
    query += b"\x00\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(min(timeout, 2.0))
        sock.sendto(query, (podnet.GATEWAY, 53))
        answer, _ = sock.recvfrom(512)
    answers = int.from_bytes(answer[6:8], "big")
    if answer[:2] != b"\x12\x34" or answer[3] & 0x0F != 0 or answers == 0:
        raise ProbeError(f"CoreDNS does not resolve {name} yet")


def fetch(cache_dir: Path | None = None) -> Path:
    """Build the node's binaries and base images into the cache; returns the bin dir."""
    node = Node(cache_dir=cache_dir)
    node.fetch()
    return node.bin_dir
