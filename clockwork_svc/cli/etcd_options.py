"""The flags of a secured etcd (TLS, user), shared by every command that talks to etcd:
`api`, `worker`, `cluster status`. A command receives them as one `EtcdSecurity`."""

from __future__ import annotations

from pathlib import Path

import click

from clockwork_svc.cli.options import file_option, option_group
from clockwork_svc.settings import EtcdSecurity, EtcdTlsSettings


def _security(
    etcd_tls_ca: Path | None,
    etcd_tls_cert: Path | None,
    etcd_tls_key: Path | None,
    etcd_user: str | None,
    etcd_password: str | None,
) -> EtcdSecurity:
    """TLS when any of its files is given; a user only with a password."""
    if (etcd_tls_cert is None) != (etcd_tls_key is None):
        raise click.UsageError(
            "--etcd-tls-cert and --etcd-tls-key go together (the client certificate and "
            "its private key)"
        )
    if (etcd_user is None) != (etcd_password is None):
        missing = "--etcd-password" if etcd_password is None else "--etcd-user"
        raise click.UsageError(
            f"--etcd-user and --etcd-password go together: {missing} is missing (without "
            "either, etcd takes the user from the client certificate's CN)"
        )
    tls = None
    if etcd_tls_ca or etcd_tls_cert:
        tls = EtcdTlsSettings(ca_file=etcd_tls_ca, cert_file=etcd_tls_cert, key_file=etcd_tls_key)
    return EtcdSecurity(tls=tls, username=etcd_user, password=etcd_password)


security_options = option_group(
    "etcd_security",
    _security,
    file_option(
        "--etcd-tls-ca",
        "CLOCKWORK_ETCD_TLS_CA",
        "Connect to etcd over TLS, trusting the CA in this file (PEM) to have signed the "
        "members' certificates.",
    ),
    file_option(
        "--etcd-tls-cert",
        "CLOCKWORK_ETCD_TLS_CERT",
        "Client certificate (PEM) for an etcd that requires one (--client-cert-auth); "
        "without a password, its CN is the etcd user. Implies TLS.",
    ),
    file_option(
        "--etcd-tls-key", "CLOCKWORK_ETCD_TLS_KEY", "The client certificate's private key (PEM)."
    ),
    click.option(
        "--etcd-user",
        envvar="CLOCKWORK_ETCD_USER",
        default=None,
        help="etcd user (with --etcd-password), when etcd has authentication on.",
    ),
    click.option(
        "--etcd-password",
        envvar="CLOCKWORK_ETCD_PASSWORD",
        default=None,
        help="The etcd user's password (prefer the environment variable).",
    ),
)
