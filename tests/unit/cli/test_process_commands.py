"""`clockwork dev|api|worker|schema migrate`: the settings their flags and environment
build, with the process itself stubbed out. Without flags each setting is its
dataclass default (clockwork_svc/settings.py), save where `dev` and a cluster differ."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clockwork_svc.cli import main
from clockwork_svc.domain.netpolicy import AddressPolicy, parse_networks
from clockwork_svc.domain.spec import Limits
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.server.grpc_server import TlsSettings
from clockwork_svc.settings import (
    DEV_SHARD_COUNT,
    ApiSettings,
    CassandraSettings,
    EtcdSettings,
    LayoutSettings,
    OpsSettings,
    ProcessSettings,
    StoreSettings,
)
from clockwork_svc.worker.worker import WorkerSettings
from tests.unit.cli.conftest import Runs

TOKEN = "0123456789abcdef0123"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main.cli, list(args), env=env)


def started(runs: Runs, *args: str) -> ProcessSettings:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    [(settings, _, _)] = runs
    return settings


def without_worker_id(etcd: EtcdSettings | None) -> EtcdSettings:
    assert etcd is not None
    return dataclasses.replace(etcd, worker_id="")


def test_dev_without_flags_runs_on_the_defaults_but_its_shard_count(runs: Any) -> None:
    settings = started(runs, "dev")
    assert runs[0][1:] == (True, True)
    assert settings.store == StoreSettings()
    assert settings.layout == LayoutSettings(shard_count=DEV_SHARD_COUNT)
    assert settings.layout.shard_count < LayoutSettings().shard_count
    # On loopback without credentials the API runs unauthenticated, with its HTTP
    # API on loopback too.
    assert settings.api == ApiSettings(
        auth=AuthSettings(enabled=False), http_listen=("127.0.0.1", 7080)
    )
    assert settings.ops == OpsSettings()
    assert settings.targets == AddressPolicy(allow_loopback=True)
    assert (settings.kafka, settings.etcd) == (None, None)


def test_api_and_worker_without_flags_run_on_the_defaults(runs: Any) -> None:
    api = started(runs, "api")
    runs.clear()
    worker = started(runs, "worker")
    for settings in (api, worker):
        assert settings.store == StoreSettings(kind="cassandra")
        assert settings.ops == OpsSettings()
        assert settings.targets == AddressPolicy()
        assert (settings.etcd, settings.kafka) == (None, None)
    assert api.api == ApiSettings(auth=AuthSettings(enabled=False))
    assert worker.worker == WorkerSettings()


def test_the_http_api_is_off_unless_asked_for_and_loopback_without_credentials(
    runs: Any,
) -> None:
    assert started(runs, "dev", "--http-listen", "off").api.http_listen is None
    runs.clear()
    assert started(runs, "api", "--http-listen", "127.0.0.1:9000").api.http_listen == (
        "127.0.0.1",
        9000,
    )
    runs.clear()
    served = started(runs, "api", "--http-listen", "0.0.0.0", "--admin-token", "a" * 16)
    assert served.api.http_listen == ("0.0.0.0", 7080)
    result = invoke("api", "--http-listen", "0.0.0.0:9000")
    assert result.exit_code == 2 and "no credentials" in result.output
    result = invoke("dev", "--http-listen", "nowhere:port")
    assert result.exit_code == 2 and "--http-listen" in result.output


def test_etcd_settings_default_but_for_the_endpoint(runs: Any) -> None:
    api = started(runs, "api", "--etcd", "etcd:1")
    runs.clear()
    worker = started(runs, "worker", "--etcd", "etcd:1")
    expected = dataclasses.replace(EtcdSettings(endpoint="etcd:1"), worker_id="")
    assert without_worker_id(api.etcd) == without_worker_id(worker.etcd) == expected


def test_schema_migrate_creates_the_default_cluster_layout(
    runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clockwork_svc.storage import cassandra

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def migrate(*args: Any, **kw: Any) -> list[str]:
        calls.append((args, kw))
        return ["0001"]

    monkeypatch.setattr(cassandra, "migrate", migrate)
    result = invoke("schema", "migrate")
    assert result.exit_code == 0, result.output
    assert "applied 1 migration(s)" in result.output
    [((points, keyspace), kw)] = calls
    default = CassandraSettings()
    assert (tuple(points), keyspace) == (default.contact_points, default.keyspace)
    assert kw["replication"] == {"class": "SimpleStrategy", "replication_factor": 1}
    layout = LayoutSettings()
    assert (kw["layout"].shard_count, kw["layout"].bucket_ms) == (
        layout.shard_count,
        layout.bucket_ms,
    )
    assert kw["connect_timeout_s"] == default.connect_timeout_s

    calls.clear()
    result = invoke(
        "schema", "migrate", "--replication", "dc1:3,dc2:2", "--shards", "8", "--bucket", "5m"
    )
    assert result.exit_code == 0, result.output
    [(_, kw)] = calls
    assert kw["replication"] == {"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": 2}
    assert (kw["layout"].shard_count, kw["layout"].bucket_ms) == (8, 300_000)


def test_each_flag_reaches_its_setting(runs: Any, tmp_path: Path) -> None:
    cert = tmp_path / "cert"
    cert.write_text("")
    settings = started(
        runs,
        "worker",
        "--cassandra", "a:1, b ,",
        "--keyspace", "ks",
        "--local-dc", "dc",
        "--cassandra-user", "user",
        "--cassandra-password", "secret",
        "--cassandra-connect-timeout", "3",
        "--cassandra-write-batch", "7",
        "--cassandra-batch-linger-ms", "0",
        "--ops-listen", "ops",
        "--log-level", "DEBUG",
        "--gc-young-threshold", "500",
        "--gc-idle-threshold", "2000",
        "--kafka", "kafka:9",
        "--allow-private-targets", "10.0.0.0/8",
        "--max-concurrent-deliveries", "3",
        "--max-tenant-share", "0.25",
        "--etcd", "etcd",
        "--cluster-name", "c",
        "--lease-ttl", "20",
    )  # fmt: skip
    assert settings.store.cassandra == CassandraSettings(
        contact_points=("a:1", "b"),
        keyspace="ks",
        local_dc="dc",
        username="user",
        password="secret",
        connect_timeout_s=3.0,
        write_batch=7,
        batch_linger_ms=0.0,
    )
    assert settings.ops == OpsSettings(
        host="ops",
        port=OpsSettings().port,
        log_level="DEBUG",
        gc_young_threshold=500,
        gc_idle_threshold=2000,
    )
    assert settings.kafka == "kafka:9"
    assert settings.targets == AddressPolicy(allowed_networks=parse_networks("10.0.0.0/8"))
    assert settings.worker == WorkerSettings(max_concurrent_deliveries=3, max_tenant_share=0.25)
    assert without_worker_id(settings.etcd) == EtcdSettings(
        endpoint="etcd", cluster="c", lease_ttl_s=20, safety_margin_s=5.0, worker_id=""
    )

    runs.clear()
    settings = started(
        runs,
        "dev",
        "--data-dir", str(tmp_path),
        "--shards", "4",
        "--listen", "0.0.0.0:1",
        "--api-tokens", f"t:{TOKEN}",
        "--tls-cert", str(cert),
        "--tls-key", str(cert),
        "--tls-client-ca", str(cert),
        "--max-payload", "10",
        "--max-message-size", "70000",
        "--max-in-flight", "7",
        "--http-listen", "0.0.0.0:8",
    )  # fmt: skip
    assert settings.store.sqlite_path == tmp_path / StoreSettings().sqlite_path.name
    assert settings.layout.shard_count == 4
    assert settings.api == ApiSettings(
        listen="0.0.0.0:1",
        auth=AuthSettings.from_pairs(f"t:{TOKEN}"),
        tls=TlsSettings(cert_file=cert, key_file=cert, client_ca_file=cert),
        limits=Limits(max_payload_bytes=10),
        max_message_bytes=70_000,
        max_in_flight=7,
        http_listen=("0.0.0.0", 8),
    )


def test_the_environment_fills_settings_too(runs: Any) -> None:
    result = invoke(
        "api",
        env={
            "CLOCKWORK_LISTEN": "0.0.0.0:9",
            "CLOCKWORK_ADMIN_TOKEN": TOKEN,
            "CLOCKWORK_CASSANDRA_WRITE_BATCH": "9",
            "CLOCKWORK_ETCD": "etcd:2",
            "CLOCKWORK_CLUSTER": "envc",
            "CLOCKWORK_GC_IDLE_THRESHOLD": "1000",
        },
    )
    assert result.exit_code == 0, result.output
    [(settings, _, _)] = runs
    assert settings.api.listen == "0.0.0.0:9"
    assert settings.api.auth == AuthSettings.from_pairs("", admin_token=TOKEN)
    assert settings.store.cassandra.write_batch == 9
    assert settings.etcd is not None
    assert (settings.etcd.endpoint, settings.etcd.cluster) == ("etcd:2", "envc")
    assert settings.ops.gc_idle_threshold == 1000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dev", "--listen", "0.0.0.0:1"], "no credentials"),
        (["dev", "--listen", "host:port"], "'host:port' is not HOST:PORT"),
        (["dev", "--api-tokens", "short"], "TENANT:TOKEN with a token of 16+"),
        (["dev", "--allow-private-targets", "nonsense"], "invalid network 'nonsense'"),
        (["dev", "--max-payload", "100000", "--max-message-size", "65536"], "at least"),
        (["dev", "--tls-cert", __file__], "--tls-cert and --tls-key go together"),
        (["api", "--cassandra", "a:x"], "'a:x' is not HOST:PORT"),
        (["worker", "--etcd", "e:x"], "'e:x' is not HOST:PORT"),
        (["schema", "migrate", "--bucket", "500ms"], "must be at least 1s"),
        (["schema", "migrate", "--replication", "dc1"], "'dc1' is not DC:RF"),
        (["worker", "--gc-idle-threshold", "99"], "must be 0 (off) or from 100 to 1000000"),
        (["worker", "--gc-idle-threshold", "-1"], "--gc-idle-threshold"),
        (["worker", "--gc-idle-threshold", "1000001"], "--gc-idle-threshold"),
    ],
)
def test_bad_flags_are_usage_errors(runs: Any, args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert not runs
