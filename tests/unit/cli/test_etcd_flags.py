"""The secured-etcd flags (TLS, user) of every command that talks to etcd: `api`,
`worker`, `cluster status`. Each reaches `EtcdSettings.security`; a bad combination
or a missing file is a usage error naming the flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clockwork_svc.cli import main
from clockwork_svc.coordination import etcd
from clockwork_svc.coordination.etcd_access import EtcdAccessError
from clockwork_svc.settings import EtcdSecurity, EtcdTlsSettings
from tests.unit.cli.conftest import Runs


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    found = {}
    for name in ("ca.crt", "tls.crt", "tls.key"):
        found[name] = tmp_path / name
        found[name].write_text("")
    return found


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main.cli, list(args), env=env)


def security_of(runs: Runs, *args: str, **env: str) -> EtcdSecurity:
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output
    [(settings, _, _)] = runs
    runs.clear()
    assert settings.etcd is not None
    return settings.etcd.security


@pytest.mark.parametrize("command", ["api", "worker"])
def test_without_the_flags_etcd_is_plain_text_and_anonymous(runs: Runs, command: str) -> None:
    assert security_of(runs, command, "--etcd", "etcd:1") == EtcdSecurity()


@pytest.mark.parametrize("command", ["api", "worker"])
def test_the_flags_reach_the_settings(runs: Runs, files: dict[str, Path], command: str) -> None:
    security = security_of(
        runs,
        command,
        "--etcd", "etcd:1",
        "--etcd-tls-ca", str(files["ca.crt"]),
        "--etcd-tls-cert", str(files["tls.crt"]),
        "--etcd-tls-key", str(files["tls.key"]),
        "--etcd-user", "clockwork",
        "--etcd-password", "secret",
    )  # fmt: skip
    tls = EtcdTlsSettings(files["ca.crt"], files["tls.crt"], files["tls.key"])
    assert security == EtcdSecurity(tls=tls, username="clockwork", password="secret")


def test_the_environment_fills_them_too(runs: Runs, files: dict[str, Path]) -> None:
    security = security_of(
        runs,
        "worker",
        CLOCKWORK_ETCD="etcd:1",
        CLOCKWORK_ETCD_TLS_CA=str(files["ca.crt"]),
        CLOCKWORK_ETCD_USER="clockwork",
        CLOCKWORK_ETCD_PASSWORD="secret",
    )
    assert security == EtcdSecurity(EtcdTlsSettings(files["ca.crt"]), "clockwork", "secret")


def test_a_client_certificate_alone_means_tls_with_the_systems_roots(
    runs: Runs, files: dict[str, Path]
) -> None:
    security = security_of(
        runs,
        "worker",
        "--etcd", "etcd:1",
        "--etcd-tls-cert", str(files["tls.crt"]),
        "--etcd-tls-key", str(files["tls.key"]),
    )  # fmt: skip
    assert security == EtcdSecurity(EtcdTlsSettings(None, files["tls.crt"], files["tls.key"]))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--etcd-tls-cert", "{tls.crt}"], "--etcd-tls-cert and --etcd-tls-key go together"),
        (["--etcd-tls-key", "{tls.key}"], "--etcd-tls-cert and --etcd-tls-key go together"),
        (["--etcd-user", "cw"], "--etcd-password is missing"),
        (["--etcd-password", "pw"], "--etcd-user is missing"),
        (["--etcd-tls-ca", "/nonexistent/ca.crt"], "'--etcd-tls-ca': File '/nonexistent/ca.crt'"),
        (["--etcd-tls-cert", "{tmp}"], "'--etcd-tls-cert': File"),  # a directory
    ],
)
@pytest.mark.parametrize("command", [["api"], ["worker"], ["cluster", "status"]])
def test_bad_flags_are_usage_errors_naming_them(
    runs: Runs,
    files: dict[str, Path],
    command: list[str],
    flags: list[str],
    message: str,
) -> None:
    values = {"tmp": str(files["ca.crt"].parent), **{k: str(v) for k, v in files.items()}}
    result = invoke(*command, "--etcd", "etcd:1", *[_fill(flag, values) for flag in flags])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert runs == []


def _fill(flag: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        flag = flag.replace("{" + key + "}", value)
    return flag


def test_cluster_status_passes_them_and_reports_a_refusal_in_one_line(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, Path]
) -> None:
    asked: list[EtcdSecurity] = []

    async def cluster_status(endpoint: str, cluster: str, security: EtcdSecurity) -> Any:
        asked.append(security)
        raise EtcdAccessError(f"etcd at {endpoint} refuses user 'cw': wrong user name or password")

    monkeypatch.setattr(etcd, "cluster_status", cluster_status)
    result = invoke(
        "cluster", "status",
        "--etcd", "10.0.0.1:2379",
        "--etcd-tls-ca", str(files["ca.crt"]),
        "--etcd-user", "cw",
        "--etcd-password", "pw",
    )  # fmt: skip
    assert result.exit_code == 1
    assert result.output == (
        "Error: etcd at 10.0.0.1:2379 refuses user 'cw': wrong user name or password\n"
    )
    assert asked == [EtcdSecurity(EtcdTlsSettings(files["ca.crt"]), "cw", "pw")]
