"""The real node's generated configuration (e2e/infra/node.py): the settings without
which no sandbox starts on this kind of host, and the fences that keep pod traffic on
this machine. The node itself is exercised by tests/kubernetes/test_real_pods.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from e2e.infra import podnet
from e2e.infra.kube import supervisor
from e2e.infra.node import CLUSTER_DOMAIN, Node

PORTS = {"kubelet": 20250, "kubelet_health": 20248, "proxy_health": 20256,
         "proxy_metrics": 20249, "dns_health": 20180}  # fmt: skip


def node(tmp_path: Path) -> Node:
    return Node(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")


def test_containerd_runs_sandboxes_this_host_allows(tmp_path: Path) -> None:
    n = node(tmp_path)
    conf = tomllib.loads(n._containerd_toml())
    cri = conf["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "localhost/clockwork-pause:1"
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(n.conf_dir / "cni")
    assert conf["grpc"]["address"] == str(n.containerd_socket)
    assert conf["root"].startswith(str(n.dir))  # nothing written outside the state dir


def test_pods_get_addresses_on_the_fenced_bridge(tmp_path: Path) -> None:
    conf = json.loads(node(tmp_path)._cni_conflist())
    bridge = conf["plugins"][0]
    assert bridge["bridge"] == podnet.BRIDGE and bridge["isGateway"] is True
    assert bridge["ipMasq"] is False  # pods never appear on the host's real network
    [[subnet]] = bridge["ipam"]["ranges"]
    assert subnet == {"subnet": podnet.SUBNET, "gateway": podnet.GATEWAY}


def test_kubelet_listens_on_the_gateway_with_cgroupfs_and_cluster_dns(tmp_path: Path) -> None:
    config = node(tmp_path)._kubelet_config(PORTS)
    assert config["address"] == podnet.GATEWAY and config["port"] == PORTS["kubelet"]
    assert config["readOnlyPort"] == 0
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["clusterDNS"] == [podnet.GATEWAY]
    assert config["clusterDomain"] == CLUSTER_DOMAIN
    assert config["imageGCHighThresholdPercent"] == 100  # unpullable images are kept


def test_coredns_answers_cluster_names_only(tmp_path: Path) -> None:
    corefile = node(tmp_path)._corefile(PORTS)
    assert f"bind {podnet.GATEWAY}" in corefile
    assert f"kubernetes {CLUSTER_DOMAIN}" in corefile
    assert "forward" not in corefile  # no name resolves to anything off this machine


def test_the_fence_drops_what_leaves_the_bridge() -> None:
    rules = podnet._NFT_RULES
    assert f'iifname "{podnet.BRIDGE}" oifname != "{podnet.BRIDGE}"' in rules
    assert "drop" in rules and "hook forward" in rules
    # Addresses kube-proxy did not rewrite never follow the default route off the machine.
    assert f"ip daddr {{ {podnet.SERVICE_RANGE}, {podnet.KWOK_POD_RANGE}" in rules


def test_the_supervisor_waits_for_each_components_condition() -> None:
    script = supervisor(
        {"a": ["run-a"], "b": ["run-b", "--x"]}, Path("/logs"), {"b": "test -e /ready"}
    )
    lines = script.splitlines()
    a, wait, b = (
        lines.index("run-a >> /logs/a.log 2>&1 &"),
        lines.index("until test -e /ready; do sleep 0.2; done"),
        lines.index("run-b --x >> /logs/b.log 2>&1 &"),
    )
    assert a < wait < b
