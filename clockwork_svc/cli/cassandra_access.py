"""The flags of a secured Cassandra (login, TLS), part of the Cassandra flags of every
command that opens the store: `api`, `worker`, `schema migrate`. They reach the
command inside its `CassandraSettings`; `refused` names them in a start-up error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from clockwork_svc.cli.options import file_option, option_group
from clockwork_svc.errors import StoreRefused
from clockwork_svc.settings import CassandraSettings, CassandraTlsSettings

_DEFAULT = CassandraSettings()
_DEFAULT_TLS = CassandraTlsSettings()

FLAGS_OF_SETTING = {
    "username": "--cassandra-user and --cassandra-password",
    "password": "--cassandra-user, and --cassandra-password or --cassandra-password-file",
    "tls": "--cassandra-tls-ca, and whether the nodes have client encryption on",
    "tls.ca_file": "--cassandra-tls-ca",
    "tls.cert_file": "--cassandra-tls-cert and --cassandra-tls-key",
    "tls.verify_hostname": "--cassandra (the addresses the nodes' certificates name) "
    "or --no-cassandra-tls-verify-hostname",
}
"""The flags that fill each `CassandraSettings` field a `StoreRefused` can name."""


@dataclass(frozen=True, slots=True)
class Access:
    """The login and TLS part of `CassandraSettings`."""

    username: str | None
    password: str | None
    tls: CassandraTlsSettings | None


def refused(exc: StoreRefused) -> str:
    """The one-line start-up error for `exc`, naming the flags to check."""
    flags = FLAGS_OF_SETTING.get(exc.setting, "the --cassandra-* flags")
    return f"{exc} (check {flags})"


def _password(password: str | None, password_file: Path | None) -> str | None:
    if password is not None and password_file is not None:
        raise click.UsageError(
            "--cassandra-password and --cassandra-password-file exclude each other"
        )
    if password_file is None:
        return password
    try:
        text = password_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {password_file}: {exc}", param_hint="--cassandra-password-file"
        ) from exc
    # A file written by `echo` or an editor ends with a newline that is not the password's.
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise click.BadParameter(
            f"{password_file} is empty", param_hint="--cassandra-password-file"
        )
    return text


def _access(
    cassandra_user: str | None,
    cassandra_password: str | None,
    cassandra_password_file: Path | None,
    cassandra_tls: bool,
    cassandra_tls_ca: Path | None,
    cassandra_tls_cert: Path | None,
    cassandra_tls_key: Path | None,
    cassandra_tls_verify_hostname: bool,
) -> Access:
    """A password only with a user; TLS when asked for or when any of its files is given."""
    password = _password(cassandra_password, cassandra_password_file)
    if password is not None and not cassandra_user:
        raise click.UsageError(
            "a Cassandra password needs --cassandra-user (the role to log in as)"
        )
    if (cassandra_tls_cert is None) != (cassandra_tls_key is None):
        missing = "--cassandra-tls-key" if cassandra_tls_key is None else "--cassandra-tls-cert"
        raise click.UsageError(
            f"--cassandra-tls-cert and --cassandra-tls-key go together (the client "
            f"certificate and its private key): {missing} is missing"
        )
    tls = None
    if cassandra_tls or cassandra_tls_ca or cassandra_tls_cert:
        tls = CassandraTlsSettings(
            ca_file=cassandra_tls_ca,
            cert_file=cassandra_tls_cert,
            key_file=cassandra_tls_key,
            verify_hostname=cassandra_tls_verify_hostname,
        )
    return Access(username=cassandra_user or None, password=password, tls=tls)


access_options = option_group(
    "cassandra_access",
    _access,
    click.option(
        "--cassandra-user",
        envvar="CLOCKWORK_CASSANDRA_USER",
        default=_DEFAULT.username,
        help="Role to log in as (PasswordAuthenticator), with a password.",
    ),
    click.option(
        "--cassandra-password",
        envvar="CLOCKWORK_CASSANDRA_PASSWORD",
        default=_DEFAULT.password,
        help="The role's password (prefer the environment variable, or the file).",
    ),
    file_option(
        "--cassandra-password-file",
        "CLOCKWORK_CASSANDRA_PASSWORD_FILE",
        "Read the role's password from this file (a mounted Secret); one trailing "
        "newline is ignored.",
    ),
    click.option(
        "--cassandra-tls/--no-cassandra-tls",
        envvar="CLOCKWORK_CASSANDRA_TLS",
        default=_DEFAULT.tls is not None,
        show_default=True,
        help="Connect over TLS, trusting the system's CAs unless --cassandra-tls-ca is "
        "given. Any --cassandra-tls-* file implies it.",
    ),
    file_option(
        "--cassandra-tls-ca",
        "CLOCKWORK_CASSANDRA_TLS_CA",
        "Connect over TLS, trusting the CA certificates in this file (PEM) to have "
        "signed the nodes' certificates.",
    ),
    file_option(
        "--cassandra-tls-cert",
        "CLOCKWORK_CASSANDRA_TLS_CERT",
        "Client certificate (PEM) for nodes with require_client_auth. Implies TLS.",
    ),
    file_option(
        "--cassandra-tls-key",
        "CLOCKWORK_CASSANDRA_TLS_KEY",
        "The client certificate's private key (PEM, not encrypted).",
    ),
    click.option(
        "--cassandra-tls-verify-hostname/--no-cassandra-tls-verify-hostname",
        envvar="CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME",
        default=_DEFAULT_TLS.verify_hostname,
        show_default=True,
        help="Check that each node's certificate names the address connected to (its "
        "IP address; a contact point's host name). Off, any certificate the CA signed passes.",
    ),
)
