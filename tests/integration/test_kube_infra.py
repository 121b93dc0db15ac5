"""The harness's Kubernetes control plane (e2e/infra/kube.py) does what the operator and
chart tests rely on: Deployments get Running pods on kwok's fake node, kubectl and helm
see the server's real version, and CRD schemas are enforced by the apiserver."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import CompletedText, KubeControlPlane

pytestmark = pytest.mark.kube

IMAGE = "registry.invalid/clockwork/never-pulled:1"
"""kwok runs no containers, so the image is never pulled."""


def ok(done: CompletedText) -> str:
    assert done.returncode == 0, f"{' '.join(done.args)}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


def kubectl(kube: KubeControlPlane, *args: str, stdin: Any = None) -> CompletedText:
    """kubectl; a ``stdin`` object is sent as a JSON manifest (``-f -``)."""
    text = None if stdin is None else json.dumps(stdin)
    return kube.run(kube.kubectl, *args, stdin=text)


@pytest.fixture
def namespace(kube_control_plane: KubeControlPlane) -> Iterator[str]:
    name = f"infra-test-{uuid.uuid4().hex[:8]}"
    ok(kubectl(kube_control_plane, "create", "namespace", name))
    yield name
    kubectl(kube_control_plane, "delete", "namespace", name, "--wait=false")


def test_a_deployment_gets_running_pods_on_the_fake_node(
    kube_control_plane: KubeControlPlane, namespace: str
) -> None:
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": IMAGE}]},
            },
        },
    }
    ok(kubectl(kube_control_plane, "apply", "-f", "-", stdin=deployment))
    # Needs the deployment and replicaset controllers, the scheduler and kwok's stages.
    ok(
        kubectl(
            kube_control_plane,
            *("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s"),
        )
    )
    pods = json.loads(
        ok(
            kubectl(
                kube_control_plane, "get", "pods", "-n", namespace, "-l", "app=web", "-o", "json"
            )
        )
    )["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"]
        assert pod["status"]["podIP"]
        ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"


def test_kubectl_and_helm_see_the_server_version(
    kube_control_plane: KubeControlPlane, tmp_path: Path
) -> None:
    want = f"v{kube_control_plane.version}"
    versions = json.loads(ok(kubectl(kube_control_plane, "version", "-o", "json")))
    assert versions["serverVersion"]["gitVersion"] == want
    assert versions["clientVersion"]["gitVersion"] == want
    helm_version = ok(
        kube_control_plane.run(kube_control_plane.helm, "version", "--template", "{{.Version}}")
    )
    assert helm_version.startswith("v3.")

    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: probe\nversion: 0.1.0\nkubeVersion: '>= 1.30.0-0'\n"
    )
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: {{ .Release.Name }}-probe\n"
        "data:\n"
        "  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n"
        '  deployments: {{ .Capabilities.APIVersions.Has "apps/v1/Deployment" | quote }}\n'
    )
    # --validate: helm asks the server for its version and API groups.
    rendered = ok(
        kube_control_plane.run(
            kube_control_plane.helm, "template", "r1", str(chart), "--validate", "-n", "default"
        )
    )
    assert f'kubeVersion: "{want}"' in rendered
    assert 'deployments: "true"' in rendered


def _crd(group: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["schedule", "replicas"],
                "properties": {
                    "schedule": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                },
            }
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def test_custom_resources_are_validated_by_their_crd_schema(
    kube_control_plane: KubeControlPlane, namespace: str
) -> None:
    group = f"{namespace}.clockwork.test"
    crd = f"widgets.{group}"
    ok(kubectl(kube_control_plane, "apply", "-f", "-", stdin=_crd(group)))
    try:
        ok(
            kubectl(
                kube_control_plane,
                *("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=30s"),
            )
        )

        def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
            return {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }

        good = widget("good", {"schedule": "*/5 * * * *", "replicas": 3})
        ok(kubectl(kube_control_plane, "apply", "-f", "-", stdin=good))
        stored = kubectl(
            kube_control_plane,
            *("get", crd, "good", "-n", namespace, "-o", "jsonpath={.spec.replicas}"),
        )
        assert ok(stored) == "3"

        bad = kubectl(kube_control_plane, "apply", "-f", "-", stdin=widget("bad", {"replicas": 0}))
        assert bad.returncode != 0
        assert "spec.replicas" in bad.stderr
        assert "spec.schedule: Required value" in bad.stderr
        missing = kubectl(kube_control_plane, "get", crd, "bad", "-n", namespace)
        assert missing.returncode != 0
        assert "NotFound" in missing.stderr
    finally:
        kubectl(kube_control_plane, "delete", "crd", crd, "--wait=false")
