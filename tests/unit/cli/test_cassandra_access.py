"""The Cassandra login and TLS flags (clockwork_svc/cli/cassandra_access.py): what
settings they build for every command that opens the store, the mistakes refused
before anything connects, and the start-up error naming the flags to check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clockwork_svc.cli import cassandra_access, main
from clockwork_svc.errors import StoreRefused
from clockwork_svc.settings import CassandraSettings, CassandraTlsSettings, ProcessSettings
from tests.unit.cli.conftest import Runs


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    """Files the flags accept (their content is read only when connecting)."""
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for path in files.values():
        path.write_text("")
    return files


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main.cli, list(args), env=env)


def cassandra_of(runs: Runs, *args: str, env: dict[str, str] | None = None) -> CassandraSettings:
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output
    [(settings, _, _)] = runs
    return settings.store.cassandra


@pytest.mark.parametrize("command", ["api", "worker"])
def test_without_flags_plain_text_and_no_login(runs: Runs, command: str) -> None:
    cassandra = cassandra_of(runs, command)
    assert (cassandra.tls, cassandra.username, cassandra.password) == (None, None, None)


@pytest.mark.parametrize("command", ["api", "worker"])
def test_each_flag_reaches_its_setting(runs: Runs, pem: dict[str, Path], command: str) -> None:
    cassandra = cassandra_of(
        runs,
        command,
        "--cassandra-user", "clockwork",
        "--cassandra-password", "secret",
        "--cassandra-tls-ca", str(pem["ca"]),
        "--cassandra-tls-cert", str(pem["cert"]),
        "--cassandra-tls-key", str(pem["key"]),
        "--no-cassandra-tls-verify-hostname",
    )  # fmt: skip
    assert (cassandra.username, cassandra.password) == ("clockwork", "secret")
    assert cassandra.tls == CassandraTlsSettings(
        ca_file=pem["ca"], cert_file=pem["cert"], key_file=pem["key"], verify_hostname=False
    )


def test_each_variable_reaches_its_setting(
    runs: Runs, pem: dict[str, Path], tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    env = {
        "CLOCKWORK_CASSANDRA_USER": "clockwork",
        "CLOCKWORK_CASSANDRA_PASSWORD_FILE": str(secret),
        "CLOCKWORK_CASSANDRA_TLS_CA": str(pem["ca"]),
        "CLOCKWORK_CASSANDRA_TLS_CERT": str(pem["cert"]),
        "CLOCKWORK_CASSANDRA_TLS_KEY": str(pem["key"]),
        "CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME": "false",
    }
    cassandra = cassandra_of(runs, "worker", env=env)
    assert (cassandra.username, cassandra.password) == ("clockwork", "from-a-file")
    assert cassandra.tls == CassandraTlsSettings(
        ca_file=pem["ca"], cert_file=pem["cert"], key_file=pem["key"], verify_hostname=False
    )


def test_tls_is_on_with_a_ca_alone_and_verifies_names_by_default(
    runs: Runs, pem: dict[str, Path]
) -> None:
    cassandra = cassandra_of(runs, "api", "--cassandra-tls-ca", str(pem["ca"]))
    assert cassandra.tls == CassandraTlsSettings(ca_file=pem["ca"])
    assert cassandra.tls.verify_hostname is True


def test_tls_without_a_ca_trusts_the_system_roots(runs: Runs) -> None:
    cassandra = cassandra_of(runs, "api", env={"CLOCKWORK_CASSANDRA_TLS": "true"})
    assert cassandra.tls == CassandraTlsSettings()


def test_the_password_file_loses_one_trailing_newline_only(runs: Runs, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(" spaced pass \r\n")
    cassandra = cassandra_of(
        runs, "api", "--cassandra-user", "u", "--cassandra-password-file", str(secret)
    )
    assert cassandra.password == " spaced pass "


def test_schema_migrate_takes_the_same_flags(
    monkeypatch: pytest.MonkeyPatch, pem: dict[str, Path]
) -> None:
    from clockwork_svc.storage import cassandra

    calls: list[dict[str, Any]] = []

    async def migrate(*args: Any, **kw: Any) -> list[str]:
        calls.append(kw)
        return []

    monkeypatch.setattr(cassandra, "migrate", migrate)
    result = invoke(
        "schema", "migrate",
        "--cassandra-user", "clockwork",
        "--cassandra-password", "secret",
        "--cassandra-tls-ca", str(pem["ca"]),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [kw] = calls
    assert (kw["username"], kw["password"]) == ("clockwork", "secret")
    assert kw["tls"] == CassandraTlsSettings(ca_file=pem["ca"])


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--cassandra-tls-cert", "{cert}"], "--cassandra-tls-key is missing"),
        (["--cassandra-tls-key", "{key}"], "--cassandra-tls-cert is missing"),
        (["--cassandra-password", "p"], "needs --cassandra-user"),
        (
            [
                "--cassandra-user",
                "u",
                "--cassandra-password",
                "p",
                "--cassandra-password-file",
                "{ca}",
            ],
            "--cassandra-password and --cassandra-password-file exclude each other",
        ),
        (["--cassandra-tls-ca", "/nonexistent/ca.crt"], "'--cassandra-tls-ca'"),
        (
            ["--cassandra-tls-cert", "/nonexistent/c", "--cassandra-tls-key", "{key}"],
            "'--cassandra-tls-cert'",
        ),
        (
            ["--cassandra-user", "u", "--cassandra-password-file", "/nonexistent/p"],
            "'--cassandra-password-file'",
        ),
        (["--cassandra-user", "u", "--cassandra-password-file", "{ca}"], "is empty"),
    ],
)
def test_bad_input_is_refused_naming_the_flag(
    runs: Runs, pem: dict[str, Path], args: list[str], named: str
) -> None:
    paths = {name: str(path) for name, path in pem.items()}
    result = invoke("worker", *(a.format(**paths) for a in args))
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert not runs


@pytest.mark.parametrize(
    ("setting", "flag"),
    [
        ("password", "--cassandra-password"),
        ("username", "--cassandra-user"),
        ("tls.ca_file", "--cassandra-tls-ca"),
        ("tls.cert_file", "--cassandra-tls-cert"),
        ("tls.verify_hostname", "--no-cassandra-tls-verify-hostname"),
        ("tls", "--cassandra-tls-ca"),
    ],
)
def test_a_refusal_names_the_flags_of_its_setting(setting: str, flag: str) -> None:
    line = cassandra_access.refused(
        StoreRefused("Cassandra at h:1 refused this client: x", setting)
    )
    assert line.startswith("Cassandra at h:1 refused this client: x (check ")
    assert flag in line
    assert "\n" not in line


def test_a_refusal_ends_start_up_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clockwork_svc import app

    async def serve(settings: ProcessSettings, *, api: bool, worker: bool) -> None:
        raise StoreRefused("Cassandra at h:1 refused this client: login refused", "password")

    monkeypatch.setattr(app, "serve", serve)
    result = invoke("api", "--cassandra-user", "u", "--cassandra-password", "bad")
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("Error: Cassandra at h:1 refused this client: login refused (check ")
    assert "--cassandra-password" in line
