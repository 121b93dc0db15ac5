"""The Helm chart, rendered and linted with the real helm: every component, the
schema's errors, optional parts, and least-privilege RBAC (no wildcards)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.conftest import CHART, KubeTools

TOKEN = "auth.adminToken=0123456789abcdef"
VARIANTS = {
    "default": [TOKEN],
    "namespaced": [TOKEN, "operator.watchNamespaces={team-a,team-b}"],
    "fixed-workers": [TOKEN, "worker.autoscaling.enabled=false"],
    "everything": [
        TOKEN,
        "worker.networkPolicy.enabled=true",
        "serviceMonitor.enabled=true",
        "api.tls.secretName=api-tls",
        "api.tls.clientCaSecretName=client-ca",
        "cassandra.existingSecret=cassandra-creds",
        "api.http.enabled=true",
    ],
}


def kinds(objects: list[dict[str, Any]]) -> Counter[str]:
    return Counter(o["kind"] for o in objects)


def by_name(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def test_helm_lint(kube: KubeTools) -> None:
    out = kube.run(kube.helm, "lint", str(CHART), "--set", TOKEN, "--kube-version", kube.version)
    assert "0 chart(s) failed" in out


def test_default_render_has_every_component(kube: KubeTools) -> None:
    objects = kube.template(TOKEN, include_crds=True)
    k = kinds(objects)
    assert k["Deployment"] == 3  # api, worker, operator
    assert k["ServiceAccount"] == 3
    assert k["PodDisruptionBudget"] == 2
    assert k["Service"] == 2
    assert k["Job"] == 1 and k["Secret"] == 1 and k["ClusterKopfPeering"] == 1
    assert k["CustomResourceDefinition"] == 3
    job = by_name(objects, "Job", "-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    worker = by_name(objects, "Deployment", "-worker")
    assert "replicas" not in worker["spec"]  # the operator owns it
    env = {e["name"]: e for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CLOCKWORK_GC_YOUNG_THRESHOLD"]["value"] == "10000"
    assert env["CLOCKWORK_GC_IDLE_THRESHOLD"]["value"] == "1000"
    operator = by_name(objects, "Deployment", "-operator")
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--worker-deployment=clockwork-system/t-clockwork-worker" in args
    for dep in (o for o in objects if o["kind"] == "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
        # only the operator talks to the Kubernetes API
        automount = pod.get("automountServiceAccountToken", True)
        assert automount is dep["metadata"]["name"].endswith("-operator")


def test_fixed_worker_count_without_autoscaling(kube: KubeTools) -> None:
    objects = kube.template(*VARIANTS["fixed-workers"])
    assert by_name(objects, "Deployment", "-worker")["spec"]["replicas"] == 2
    args = by_name(objects, "Deployment", "-operator")["spec"]["template"]["spec"]
    assert not any("--worker-deployment" in a for a in args["containers"][0]["args"])
    assert not [o for o in objects if o["kind"] == "Role"]


def test_optional_parts(kube: KubeTools) -> None:
    objects = kube.template(*VARIANTS["everything"])
    assert kinds(objects)["ServiceMonitor"] == 2
    policy = by_name(objects, "NetworkPolicy", "-worker")
    blocked = policy["spec"]["egress"][1]["to"][0]["ipBlock"]["except"]
    assert "169.254.0.0/16" in blocked and "10.0.0.0/8" in blocked
    api = by_name(objects, "Deployment", "-api")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in api["containers"][0]["env"]}
    assert env["CLOCKWORK_TLS_CLIENT_CA"]["value"] == "/etc/clockwork/client-ca/ca.crt"
    assert env["CLOCKWORK_CASSANDRA_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == (
        "cassandra-creds"
    )
    # The HTTP API on a port of its own, HTTPS with the gRPC listener's certificate.
    assert env["CLOCKWORK_HTTP_LISTEN"]["value"] == "0.0.0.0:7080"
    service = by_name(objects, "Service", "-api")["spec"]["ports"]
    assert {"name": "http", "port": 7080, "targetPort": "http", "appProtocol": "https"} in service


def test_the_http_api_is_off_by_default(kube: KubeTools) -> None:
    objects = kube.template(TOKEN)
    api = by_name(objects, "Deployment", "-api")["spec"]["template"]["spec"]
    assert "CLOCKWORK_HTTP_LISTEN" not in {e["name"] for e in api["containers"][0]["env"]}
    ports = by_name(objects, "Service", "-api")["spec"]["ports"]
    assert [p["name"] for p in ports] == ["grpc", "ops"]


def test_private_targets_reach_the_api_and_the_workers(kube: KubeTools) -> None:
    """The api refuses a private callback URL at create time unless it is allowed
    there too, not only in the workers that connect."""
    objects = kube.template(TOKEN, "worker.allowPrivateTargets=10.20.0.0/16")
    for component in ("-api", "-worker"):
        pod = by_name(objects, "Deployment", component)["spec"]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["CLOCKWORK_ALLOW_PRIVATE_TARGETS"]["value"] == "10.20.0.0/16", component
    api = by_name(kube.template(TOKEN), "Deployment", "-api")["spec"]["template"]["spec"]
    assert "CLOCKWORK_ALLOW_PRIVATE_TARGETS" not in {e["name"] for e in api["containers"][0]["env"]}


def test_the_migration_job_can_be_placed_like_the_other_pods(kube: KubeTools) -> None:
    """A cluster whose nodes are tainted or selected must be able to run the hook too."""
    objects = kube.template(
        TOKEN,
        "migration.nodeSelector.pool=clockwork",
        "migration.tolerations[0].key=dedicated",
        "migration.tolerations[0].operator=Exists",
        "migration.resources.requests.cpu=50m",
    )
    pod = by_name(objects, "Job", "-migrate")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "clockwork"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}


def test_large_numbers_from_a_values_file_render_as_integers(
    kube: KubeTools, tmp_path: Path
) -> None:
    """A values file's numbers reach the template as floats: 1000000 must not render
    as 1e+06, which the worker would refuse."""
    values = tmp_path / "values.yaml"
    values.write_text("worker:\n  gcYoungThreshold: 1000000\n  gcIdleThreshold: 1000000\n")
    objects = kube.template(TOKEN, values=values)
    worker = by_name(objects, "Deployment", "-worker")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in worker["containers"][0]["env"]}
    assert env["CLOCKWORK_GC_YOUNG_THRESHOLD"]["value"] == "1000000"
    assert env["CLOCKWORK_GC_IDLE_THRESHOLD"]["value"] == "1000000"


def test_namespaced_operator_gets_roles_per_namespace(kube: KubeTools) -> None:
    objects = kube.template(*VARIANTS["namespaced"])
    roles = {
        o["metadata"]["namespace"]
        for o in objects
        if o["kind"] == "Role" and "namespace" in o["metadata"]
    }
    assert {"team-a", "team-b"} <= roles
    assert kinds(objects)["KopfPeering"] == 2
    cluster_role = by_name(objects, "ClusterRole", "-operator")
    assert not any("clockworkschedules" in r["resources"] for r in cluster_role["rules"])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rbac_has_no_wildcards(kube: KubeTools, variant: str) -> None:
    objects = kube.template(*VARIANTS[variant])
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    assert rules
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert "*" not in rule.get(key, []), f"wildcard in {key}: {rule}"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    secrets = [r for r in rules if "secrets" in r["resources"]]
    assert all(r["verbs"] == ["get"] for r in secrets)
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert all(b["roleRef"]["name"] != "cluster-admin" for b in bindings)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ([], "auth.adminToken"),
        (["auth.adminToken=short"], "adminToken"),
        ([TOKEN, "api.port=0"], "port"),
        ([TOKEN, "etcd.endpoint=no-port"], "endpoint"),
        ([TOKEN, "worker.autoscaling.hysteresis=2"], "hysteresis"),
        ([TOKEN, "worker.gcYoungThreshold=50"], "gcYoungThreshold"),
        ([TOKEN, "worker.gcYoungThreshold=1000001"], "gcYoungThreshold"),
        ([TOKEN, "worker.gcIdleThreshold=50"], "gcIdleThreshold"),
        ([TOKEN, "worker.gcIdleThreshold=-1"], "gcIdleThreshold"),
        ([TOKEN, "api.unknownKey=1"], "unknownKey"),
        ([TOKEN, "api.http.port=70000"], "port"),
        ([TOKEN, "etcd.tls.existingSecret=Not_A_Name"], "/etcd/tls/existingSecret"),
        ([TOKEN, "etcd.auth.existingSecret=-bad"], "/etcd/auth/existingSecret"),
        ([TOKEN, "etcd.auth.password=inline"], "additional properties 'password' not allowed"),
        ([TOKEN, "etcd.tls.clientCertificate=maybe"], "/etcd/tls/clientCertificate"),
        (
            [TOKEN, "cassandra.auth.existingSecret=cass-login", "cassandra.username=clockwork"],
            "cassandra.auth.existingSecret gives the username and the password",
        ),
        ([TOKEN, "cassandra.tls.existingSecret=Not_A_Name"], "/cassandra/tls/existingSecret"),
        ([TOKEN, "cassandra.tls.verifyHostname=maybe"], "/cassandra/tls/verifyHostname"),
        ([TOKEN, "cassandra.tls.caFile=/x"], "caFile"),
        ([TOKEN, "cassandra.auth.username=x"], "username"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    kube: KubeTools, sets: list[str], message: str
) -> None:
    argv = [kube.helm, "template", "t", str(CHART), "--kube-version", kube.version]
    for pair in sets:
        argv += ["--set", pair]
    out = kube.run(*argv, check=False)
    assert "Error" in out and message in out, out
