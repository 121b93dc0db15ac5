"""What a failed etcd call says about Clockwork's etcd settings (TLS and credentials),
in one line that names the setting to fix, by its command-line flag.

gRPC reports a refused TLS handshake as UNAVAILABLE, like a member that is down; only
its details tell them apart. The details matched here are those of grpcio 1.85
against etcd 3.5 (tests/integration/test_etcd_security.py provokes each one):

- our CA does not trust the member: `CERTIFICATE_VERIFY_FAILED`;
- the member's certificate does not name the address dialled: `Hostname Verification`;
- the member refuses our client certificate, or its absence (etcd's
  `--client-cert-auth`): the handshake completes, then the member's alert arrives as
  `Unwrap failed (TSI_DATA_CORRUPTED)`;
- TLS to a plain-text member: `Handshake read failed`; plain text to a TLS member:
  `Socket closed`.

Authentication and permission errors come as etcd's own messages.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from clockwork_svc.errors import ClockworkError
from clockwork_svc.settings import EtcdSecurity, EtcdSettings, EtcdTlsSettings


class EtcdAccessError(ClockworkError):
    """etcd refuses Clockwork's TLS settings or credentials: retrying will not help."""


def channel_credentials(tls: EtcdTlsSettings) -> grpc.ChannelCredentials:
    """The TLS credentials of a channel to etcd, read from the files now (blocking)."""
    ca = _read(tls.ca_file, "--etcd-tls-ca")
    cert = _read(tls.cert_file, "--etcd-tls-cert")
    key = _read(tls.key_file, "--etcd-tls-key")
    _check_pem(tls)
    return grpc.ssl_channel_credentials(ca, key, cert)


def _check_pem(tls: EtcdTlsSettings) -> None:
    """gRPC takes any bytes, and a file that is not what it should be shows only as
    "Failed to create security handshaker" at the first call; Python's ssl says which."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(tls.ca_file))
        except ssl.SSLError as exc:
            raise EtcdAccessError(
                f"--etcd-tls-ca file {tls.ca_file} holds no PEM certificate "
                f"({exc.reason or 'bad PEM'})"
            ) from exc
    if tls.cert_file is not None and tls.key_file is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_passphrase)
        except ssl.SSLError as exc:
            raise EtcdAccessError(
                f"--etcd-tls-cert {tls.cert_file} and --etcd-tls-key {tls.key_file} are not a "
                f"PEM certificate and its unencrypted private key ({exc.reason or 'bad PEM'})"
            ) from exc


def _no_passphrase() -> str:
    """gRPC takes no passphrase: an encrypted key fails here instead of prompting."""
    return ""


def _read(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EtcdAccessError(f"cannot read {flag} file {path}: {exc.strerror}") from exc


def status_of(exc: BaseException) -> tuple[grpc.StatusCode | None, str]:
    """The gRPC status code and details behind an etcd call's failure (aetcd raises
    its own errors with the gRPC error as their cause)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, grpc.aio.AioRpcError):
            return cause.code(), cause.details() or ""
        cause = cause.__cause__
    return None, str(exc)


def diagnose(exc: BaseException, settings: EtcdSettings) -> str | None:
    """One line naming the setting to fix when `exc` shows that etcd refuses
    Clockwork's TLS settings or credentials; None for anything else (a member down or
    slow, an expired token), which a retry may cure."""
    if isinstance(exc, EtcdAccessError):
        return str(exc)
    code, details = status_of(exc)
    at = f"etcd at {settings.endpoint}"
    security = settings.security
    tls = security.tls
    if "CERTIFICATE_VERIFY_FAILED" in details:
        if tls is not None and tls.ca_file is not None:
            return (
                f"{at} presents a certificate that the CA in --etcd-tls-ca ({tls.ca_file}) "
                "did not sign: give the CA that signed etcd's certificates"
            )
        return (
            f"{at} presents a certificate that no CA this system trusts signed: give its CA "
            "with --etcd-tls-ca"
        )
    if "Hostname Verification" in details or "Peer name" in details:
        return (
            f"{at} presents a certificate that does not name the address or DNS name given "
            "in --etcd: give the members as their certificates name them"
        )
    if tls is not None and ("TSI_DATA_CORRUPTED" in details or "Unwrap failed" in details):
        if tls.cert_file is None:
            return (
                f"{at} requires a client certificate (etcd --client-cert-auth): set "
                "--etcd-tls-cert and --etcd-tls-key"
            )
        return (
            f"{at} refuses the client certificate in --etcd-tls-cert ({tls.cert_file}): "
            "it must be signed by a CA in etcd's --trusted-ca-file"
        )
    if tls is not None and ("Handshake read failed" in details or "WRONG_VERSION" in details):
        return (
            f"{at} does not answer TLS (its client URL is http): point --etcd at its https "
            "client URL, or drop --etcd-tls-ca, --etcd-tls-cert and --etcd-tls-key"
        )
    if tls is None and code == grpc.StatusCode.UNAVAILABLE and "Socket closed" in details:
        return (
            f"{at} closed the connection without an answer, as a TLS member does to plain "
            "text: set --etcd-tls-ca (and --etcd-tls-cert, --etcd-tls-key)"
        )
    return _diagnose_auth(code, details, at, security, settings)


def _diagnose_auth(
    code: grpc.StatusCode | None,
    details: str,
    at: str,
    security: EtcdSecurity,
    settings: EtcdSettings,
) -> str | None:
    if "invalid user ID or password" in details:
        return (
            f"{at} refuses user {security.username!r}: wrong user name or password (check "
            "--etcd-user and --etcd-password)"
        )
    if "authentication is not enabled" in details:
        return (
            f"{at} has authentication off and takes no password: drop --etcd-user and "
            "--etcd-password, or enable authentication in etcd"
        )
    if "user name is empty" in details:
        return (
            f"{at} has authentication on and no user was given: set --etcd-user and "
            "--etcd-password, or a client certificate (--etcd-tls-cert) whose CN is an etcd user"
        )
    if code == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in details:
        if security.username is not None:
            who = f"user {security.username!r} (--etcd-user)"
        elif security.tls is not None and security.tls.cert_file is not None:
            who = "the user named by the CN of --etcd-tls-cert"
        else:
            who = "an anonymous client"
        return (
            f"{at} denies {who} access to Clockwork's keys: grant its role readwrite on "
            f"the key prefixes {settings.prefix} and {settings.load_prefix}"
        )
    return None
