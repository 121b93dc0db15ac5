"""The chart's values for secured stores, rendered with the real helm.

etcd (`etcd.tls`, `etcd.auth`): the api and the workers, the only pods that talk to
etcd, get its CA and client certificate mounted read-only from a Secret and the user
from another. Cassandra (`cassandra.tls`, `cassandra.auth`): every pod that opens the
store (api, workers, the migration Job) gets the same from its own Secrets; the
operator, which opens neither, gets nothing. The schema's refusals of bad values are in
test_chart.py."""

from __future__ import annotations

from typing import Any

from tests.kubernetes.conftest import KubeTools

TOKEN = "auth.adminToken=0123456789abcdef0123"
ETCD_MOUNT = "/etc/clockwork/etcd-tls"
CASSANDRA_MOUNT = "/etc/clockwork/cassandra-tls"
STORE_PODS = ("api", "worker", "migration")
ETCD_SECURITY_ENV = {
    "CLOCKWORK_ETCD_TLS_CA",
    "CLOCKWORK_ETCD_TLS_CERT",
    "CLOCKWORK_ETCD_TLS_KEY",
    "CLOCKWORK_ETCD_USER",
    "CLOCKWORK_ETCD_PASSWORD",
}
CASSANDRA_SECURITY_ENV = {
    "CLOCKWORK_CASSANDRA_TLS",
    "CLOCKWORK_CASSANDRA_TLS_CA",
    "CLOCKWORK_CASSANDRA_TLS_CERT",
    "CLOCKWORK_CASSANDRA_TLS_KEY",
    "CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME",
    "CLOCKWORK_CASSANDRA_USER",
    "CLOCKWORK_CASSANDRA_PASSWORD",
}


def pods(kube: KubeTools, *sets: str) -> dict[str, dict[str, Any]]:
    """Each workload's pod spec, by component (api, worker, operator, migration)."""
    found = {}
    for obj in kube.template(TOKEN, *sets):
        if obj["kind"] in ("Deployment", "Job"):
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            found[component] = obj["spec"]["template"]["spec"]
    return found


def env(pod: dict[str, Any]) -> dict[str, Any]:
    [container] = pod["containers"]
    names = [e["name"] for e in container.get("env", [])]
    assert len(names) == len(set(names)), f"a variable is set twice: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [container] = pod["containers"]
    return {m["name"]: m for m in container.get("volumeMounts", [])}


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod.get("volumes", [])}


def test_by_default_no_pod_has_etcd_tls_or_a_user(kube: KubeTools) -> None:
    for component, pod in pods(kube).items():
        assert not ETCD_SECURITY_ENV & set(env(pod)), component
        assert "etcd-tls" not in volumes(pod), component


def test_the_api_and_workers_get_the_certificates_and_the_user(kube: KubeTools) -> None:
    rendered = pods(
        kube,
        "etcd.tls.existingSecret=etcd-client-tls",
        "etcd.auth.existingSecret=etcd-user",
        "api.tls.secretName=api-tls",
    )
    for component in ("api", "worker"):
        pod = rendered[component]
        found = env(pod)
        assert found["CLOCKWORK_ETCD_TLS_CA"] == f"{ETCD_MOUNT}/ca.crt"
        assert found["CLOCKWORK_ETCD_TLS_CERT"] == f"{ETCD_MOUNT}/tls.crt"
        assert found["CLOCKWORK_ETCD_TLS_KEY"] == f"{ETCD_MOUNT}/tls.key"
        for variable, key in (
            ("CLOCKWORK_ETCD_USER", "username"),
            ("CLOCKWORK_ETCD_PASSWORD", "password"),
        ):
            assert found[variable] == {"secretKeyRef": {"name": "etcd-user", "key": key}}
        assert mounts(pod)["etcd-tls"] == {
            "name": "etcd-tls",
            "mountPath": ETCD_MOUNT,
            "readOnly": True,
        }
        secret = volumes(pod)["etcd-tls"]["secret"]
        assert secret == {"secretName": "etcd-client-tls", "defaultMode": 0o440}
    # The api's own TLS is mounted beside it.
    assert {"tls", "etcd-tls"} <= set(volumes(rendered["api"]))
    for component in ("operator", "migration"):
        assert not ETCD_SECURITY_ENV & set(env(rendered[component])), component
        assert "etcd-tls" not in volumes(rendered[component]), component


def test_a_ca_without_a_client_certificate(kube: KubeTools) -> None:
    rendered = pods(kube, "etcd.tls.existingSecret=etcd-ca", "etcd.tls.clientCertificate=false")
    for component in ("api", "worker"):
        found = env(rendered[component])
        assert found["CLOCKWORK_ETCD_TLS_CA"] == f"{ETCD_MOUNT}/ca.crt"
        assert not {
            "CLOCKWORK_ETCD_TLS_CERT",
            "CLOCKWORK_ETCD_TLS_KEY",
            "CLOCKWORK_ETCD_USER",
        } & set(found)


def test_by_default_plain_text_and_no_login(kube: KubeTools) -> None:
    for component, pod in pods(kube).items():
        assert not CASSANDRA_SECURITY_ENV & set(env(pod)), component
        assert "cassandra-tls" not in volumes(pod), component


def test_tls_and_login_from_secrets_reach_every_pod_that_opens_the_store(
    kube: KubeTools,
) -> None:
    rendered = pods(
        kube,
        "cassandra.tls.existingSecret=cassandra-tls",
        "cassandra.auth.existingSecret=cass-login",
    )
    for component in STORE_PODS:
        pod = rendered[component]
        found = env(pod)
        assert found["CLOCKWORK_CASSANDRA_TLS_CA"] == f"{CASSANDRA_MOUNT}/ca.crt", component
        assert found["CLOCKWORK_CASSANDRA_TLS_CERT"] == f"{CASSANDRA_MOUNT}/tls.crt", component
        assert found["CLOCKWORK_CASSANDRA_TLS_KEY"] == f"{CASSANDRA_MOUNT}/tls.key", component
        assert "CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME" not in found, component
        for variable, key in (
            ("CLOCKWORK_CASSANDRA_USER", "username"),
            ("CLOCKWORK_CASSANDRA_PASSWORD", "password"),
        ):
            assert found[variable] == {"secretKeyRef": {"name": "cass-login", "key": key}}
        assert mounts(pod)["cassandra-tls"] == {
            "name": "cassandra-tls",
            "mountPath": CASSANDRA_MOUNT,
            "readOnly": True,
        }
        secret = volumes(pod)["cassandra-tls"]["secret"]
        assert secret == {"secretName": "cassandra-tls", "defaultMode": 0o440}, component
    operator = rendered["operator"]
    assert not CASSANDRA_SECURITY_ENV & set(env(operator))
    assert "cassandra-tls" not in volumes(operator)


def test_a_ca_only_secret_and_no_name_check(kube: KubeTools) -> None:
    rendered = pods(
        kube,
        "cassandra.tls.existingSecret=cassandra-ca",
        "cassandra.tls.clientCertificate=false",
        "cassandra.tls.verifyHostname=false",
    )
    for component in STORE_PODS:
        found = env(rendered[component])
        assert found["CLOCKWORK_CASSANDRA_TLS_CA"] == f"{CASSANDRA_MOUNT}/ca.crt"
        assert found["CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME"] == "false"
        assert not {"CLOCKWORK_CASSANDRA_TLS_CERT", "CLOCKWORK_CASSANDRA_TLS_KEY"} & set(found)


def test_tls_on_the_system_roots_mounts_nothing(kube: KubeTools) -> None:
    rendered = pods(kube, "cassandra.tls.enabled=true")
    for component in STORE_PODS:
        pod = rendered[component]
        assert env(pod)["CLOCKWORK_CASSANDRA_TLS"] == "true"
        assert "CLOCKWORK_CASSANDRA_TLS_CA" not in env(pod)
        assert "cassandra-tls" not in volumes(pod)


def test_tls_secret_beside_the_api_and_etcd_ones(kube: KubeTools) -> None:
    """The api pod mounts each Secret it is given, each once."""
    api = pods(
        kube,
        "cassandra.tls.existingSecret=cassandra-tls",
        "api.tls.secretName=api-tls",
        "api.tls.clientCaSecretName=client-ca",
    )["api"]
    assert {"tls", "client-ca", "cassandra-tls"} <= set(volumes(api)) == set(mounts(api))
