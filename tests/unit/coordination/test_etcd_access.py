"""The etcd security settings' own checks, the name a TLS client checks a member's
certificate against, and the one-line diagnosis of a refused connection or call.

The details strings are grpcio 1.85's and etcd 3.5's, as
tests/integration/test_etcd_security.py provokes them against a real member."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from clockwork_svc.coordination import etcd_access
from clockwork_svc.coordination.endpoints import grpc_target, tls_name
from clockwork_svc.coordination.etcd_access import EtcdAccessError
from clockwork_svc.settings import EtcdSecurity, EtcdSettings, EtcdTlsSettings
from e2e.infra import pki

CA = Path("/etc/etcd/ca.crt")
CERT = EtcdTlsSettings(CA, Path("/etc/etcd/tls.crt"), Path("/etc/etcd/tls.key"))
CA_ONLY = EtcdTlsSettings(CA)
UNAVAILABLE = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:10.0.0.1:2379: "


class FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def settings(security: EtcdSecurity) -> EtcdSettings:
    return EtcdSettings(endpoint="10.0.0.1:2379", cluster="prod", security=security)


def diagnosis(code: grpc.StatusCode, details: str, security: EtcdSecurity) -> str | None:
    # As aetcd raises it: its own error, the gRPC error as the cause.
    try:
        try:
            raise FakeRpcError(code, details)
        except grpc.aio.AioRpcError as exc:
            raise RuntimeError(details) from exc
    except RuntimeError as wrapped:
        return etcd_access.diagnose(wrapped, settings(security))


def test_a_certificate_goes_with_its_key() -> None:
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        EtcdTlsSettings(CA, cert_file=Path("tls.crt"))
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        EtcdTlsSettings(CA, key_file=Path("tls.key"))


def test_a_user_goes_with_a_password_which_is_never_shown() -> None:
    with pytest.raises(ValueError, match="username and password go together"):
        EtcdSecurity(username="clockwork")
    with pytest.raises(ValueError, match="username and password go together"):
        EtcdSecurity(password="secret")
    assert "secret" not in repr(EtcdSettings(security=EtcdSecurity(None, "cw", "secret")))


def test_an_unreadable_file_is_named_by_its_flag(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate, but readable")
    with pytest.raises(EtcdAccessError, match=r"cannot read --etcd-tls-cert file .*gone\.crt"):
        etcd_access.channel_credentials(
            EtcdTlsSettings(ca, tmp_path / "gone.crt", tmp_path / "gone.key")
        )


def test_files_that_are_not_pem_are_named_before_any_connection(tmp_path: Path) -> None:
    good = pki.make_pki(tmp_path / "pki", "test-ca", ("a", "b"))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not PEM\n")
    etcd_access.channel_credentials(
        EtcdTlsSettings(good / "ca.crt", good / "a.crt", good / "a.key")
    )
    with pytest.raises(EtcdAccessError, match=r"--etcd-tls-ca file .*garbage\.pem holds no PEM"):
        etcd_access.channel_credentials(EtcdTlsSettings(garbage))
    with pytest.raises(EtcdAccessError, match=r"--etcd-tls-cert .*garbage\.pem and --etcd-tls-key"):
        etcd_access.channel_credentials(EtcdTlsSettings(None, garbage, good / "a.key"))
    with pytest.raises(EtcdAccessError, match="KEY_VALUES_MISMATCH"):
        etcd_access.channel_credentials(EtcdTlsSettings(None, good / "a.crt", good / "b.key"))


@pytest.mark.parametrize(
    ("endpoints", "first", "name"),
    [
        ("10.0.0.1:2379", 0, "10.0.0.1"),
        ("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3", 0, "10.0.0.1"),
        ("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3", 2, "10.0.0.3"),
        ("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3", 4, "10.0.0.2"),
        ("[fd00::1]:2379,[fd00::2]:2379", 1, "fd00::2"),
        ("etcd.db.svc:2379", 3, "etcd.db.svc"),
    ],
)
def test_each_session_checks_the_member_it_tries_first_by_its_own_name(
    endpoints: str, first: int, name: str
) -> None:
    assert tls_name(endpoints, first) == name
    assert (
        grpc_target(endpoints, first)
        .removeprefix("ipv4:")
        .removeprefix("ipv6:")
        .startswith((name, f"[{name}]", f"dns:///{name}"))
    )


@pytest.mark.parametrize(
    ("code", "details", "security", "expected"),
    [
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
            "error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
            EtcdSecurity(CERT),
            "certificate that the CA in --etcd-tls-ca (/etc/etcd/ca.crt) did not sign",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "CERTIFICATE_VERIFY_FAILED",
            EtcdSecurity(EtcdTlsSettings(None, CERT.cert_file, CERT.key_file)),
            "no CA this system trusts signed: give its CA with --etcd-tls-ca",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Custom verification check failed with error: UNAUTHENTICATED: "
            "Hostname Verification Check failed.",
            EtcdSecurity(CERT),
            "does not name the address or DNS name given in --etcd",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Unwrap failed (TSI_DATA_CORRUPTED)",
            EtcdSecurity(CA_ONLY),
            "requires a client certificate (etcd --client-cert-auth): set --etcd-tls-cert "
            "and --etcd-tls-key",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Unwrap failed (TSI_DATA_CORRUPTED)",
            EtcdSecurity(CERT),
            "refuses the client certificate in --etcd-tls-cert (/etc/etcd/tls.crt)",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Handshake read failed (Socket closed)",
            EtcdSecurity(CA_ONLY),
            "does not answer TLS (its client URL is http)",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Socket closed",
            EtcdSecurity(),
            "as a TLS member does to plain text: set --etcd-tls-ca",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            "etcdserver: authentication failed, invalid user ID or password",
            EtcdSecurity(CERT, "clockwork", "wrong"),
            "refuses user 'clockwork': wrong user name or password (check --etcd-user and "
            "--etcd-password)",
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "etcdserver: authentication is not enabled",
            EtcdSecurity(None, "clockwork", "pw"),
            "has authentication off and takes no password",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            "etcdserver: user name is empty",
            EtcdSecurity(CA_ONLY),
            "has authentication on and no user was given",
        ),
        (
            grpc.StatusCode.PERMISSION_DENIED,
            "etcdserver: permission denied",
            EtcdSecurity(CERT),
            "denies the user named by the CN of --etcd-tls-cert access to Clockwork's keys: "
            "grant its role readwrite on the key prefixes /clockwork/prod/ and "
            "/clockwork-load/prod/",
        ),
        (
            grpc.StatusCode.PERMISSION_DENIED,
            "etcdserver: permission denied",
            EtcdSecurity(CERT, "cw", "pw"),
            "denies user 'cw' (--etcd-user) access",
        ),
    ],
)
def test_a_settings_mistake_reads_as_one_line_naming_the_flag(
    code: grpc.StatusCode, details: str, security: EtcdSecurity, expected: str
) -> None:
    found = diagnosis(code, details, security)
    assert found is not None and found.startswith("etcd at 10.0.0.1:2379 ")
    assert expected in found and "\n" not in found


@pytest.mark.parametrize(
    ("code", "details", "security"),
    [
        # A member down, or not up yet: the coordinator keeps trying.
        (
            grpc.StatusCode.UNAVAILABLE,
            UNAVAILABLE + "Failed to connect to remote host: Connection refused",
            EtcdSecurity(CERT),
        ),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", EtcdSecurity(CERT)),
        # A token etcd forgot (a restart, or unused past --auth-token-ttl): a new
        # client authenticates again.
        (
            grpc.StatusCode.UNAUTHENTICATED,
            "etcdserver: invalid auth token",
            EtcdSecurity(CERT, "cw", "pw"),
        ),
        # Plain text to a member that closed the connection is a hint only with TLS off.
        (grpc.StatusCode.UNAVAILABLE, UNAVAILABLE + "Socket closed", EtcdSecurity(CERT)),
    ],
)
def test_trouble_a_retry_may_cure_is_no_settings_mistake(
    code: grpc.StatusCode, details: str, security: EtcdSecurity
) -> None:
    assert diagnosis(code, details, security) is None


def test_a_failure_without_a_grpc_cause_is_no_settings_mistake() -> None:
    assert etcd_access.status_of(TimeoutError("slow")) == (None, "slow")
    assert etcd_access.diagnose(TimeoutError(), settings(EtcdSecurity(CERT))) is None
