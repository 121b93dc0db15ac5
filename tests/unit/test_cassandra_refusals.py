"""Start-up against a Cassandra that refuses the client (storage/cassandra/connecting.py):
which driver errors are refusals retrying cannot fix, the setting each one names, and
how soon `connect` gives up. The errors are the ones the driver raised against the
secured test node (tests/integration/test_cassandra_security.py)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from cassandra import AuthenticationFailed, OperationTimedOut
from cassandra.cluster import NoHostAvailable

from clockwork_svc.errors import StoreRefused, StoreUnavailable
from clockwork_svc.settings import CassandraTlsSettings
from clockwork_svc.storage.cassandra import connecting

HOST = "127.0.0.1:9142"
CA_ONLY = CassandraTlsSettings(ca_file=Path("ca.crt"))
MUTUAL = CassandraTlsSettings(
    ca_file=Path("ca.crt"), cert_file=Path("client.crt"), key_file=Path("client.key")
)


def handshake_error(reason: str) -> OSError:
    """What the driver makes of an error of the TLS handshake: an OSError with the text."""
    return PermissionError(1, f"Tried connecting to [('127.0.0.1', 9142)]. Last error: {reason}")


WRONG_PASSWORD = AuthenticationFailed(
    "Failed to authenticate to 127.0.0.1:9142: Error from server: code=0100 [Bad credentials] "
    'message="Provided username clockwork and/or password are incorrect"'
)
UNTRUSTED = handshake_error(
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
    "certificate (_ssl.c:1006)"
)
WRONG_NAME = handshake_error(
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch, "
    "certificate is not valid for '127.0.0.5'. (_ssl.c:1006)"
)
CLOSED_AFTER_HANDSHAKE = ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)")
CERT_REJECTED = ssl.SSLError(1, "[SSL: TLSV1_ALERT_INTERNAL_ERROR] tlsv1 alert internal error")
PLAIN_TEXT_NODE = handshake_error("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")


@pytest.mark.parametrize(
    ("error", "tls", "setting", "words"),
    [
        (WRONG_PASSWORD, MUTUAL, "password", "Provided username clockwork and/or password"),
        (
            AuthenticationFailed("Remote end requires authentication"),
            None,
            "username",
            "require a login",
        ),
        (UNTRUSTED, CA_ONLY, "tls.ca_file", "not trusted (unable to get local issuer certificate)"),
        (WRONG_NAME, CA_ONLY, "tls.verify_hostname", "not valid for '127.0.0.5'"),
        (CLOSED_AFTER_HANDSHAKE, CA_ONLY, "tls.cert_file", "requires a client certificate"),
        (CERT_REJECTED, MUTUAL, "tls.cert_file", "refused the client certificate"),
        (PLAIN_TEXT_NODE, CA_ONLY, "tls", "is client encryption on at the node?"),
    ],
)
def test_a_refusal_names_its_setting(
    error: BaseException, tls: CassandraTlsSettings | None, setting: str, words: str
) -> None:
    found = connecting.refusal(error, tls)
    assert found is not None
    assert found.setting == setting
    assert words in found.reason
    assert "_ssl.c" not in found.reason and "\n" not in found.reason
    assert "Tried connecting" not in found.reason


@pytest.mark.parametrize(
    ("error", "tls"),
    [
        (ConnectionRefusedError(111, "Connection refused"), None),
        (ConnectionRefusedError(111, "Connection refused"), MUTUAL),
        (ConnectionResetError(104, "Connection reset by peer"), None),
        (OperationTimedOut("timed out"), MUTUAL),
        (OSError(113, "No route to host"), CA_ONLY),
        # The node could not read the role: too few replicas of system_auth are up.
        (
            AuthenticationFailed(
                "Failed to authenticate to 127.0.0.2:9142: Error from server: code=0100 "
                '[Bad credentials] message="Unable to perform authentication: Cannot achieve '
                'consistency level LOCAL_QUORUM"'
            ),
            MUTUAL,
        ),
    ],
)
def test_an_unreachable_node_is_no_refusal(
    error: BaseException, tls: CassandraTlsSettings | None
) -> None:
    assert connecting.refusal(error, tls) is None


def test_a_connection_closed_after_the_handshake_is_refused_only_when_it_happens_again() -> None:
    """A node going down closes connections too, once; a refused certificate every time."""
    closed = connecting.refusal(CLOSED_AFTER_HANDSHAKE, CA_ONLY)
    assert closed is not None and not closed.certain
    alert = connecting.refusal(CERT_REJECTED, MUTUAL)
    assert alert is not None and alert.certain


def test_refusals_are_told_per_host() -> None:
    exc = NoHostAvailable(
        "Unable to connect to any servers",
        {"10.0.0.1:9042": ConnectionRefusedError(111, "refused"), "10.0.0.2:9042": UNTRUSTED},
    )
    found = connecting.refusals(exc, CA_ONLY)
    assert list(found) == ["10.0.0.2:9042"]
    assert found["10.0.0.2:9042"].setting == "tls.ca_file"


def failing_attempts(monkeypatch: pytest.MonkeyPatch, *errors: BaseException) -> list[float]:
    """`_connect_once` fails with `errors` in turn (the last one for good); returns the
    times of the attempts."""
    attempts: list[float] = []

    def connect_once(*args: Any) -> tuple[Any, Any]:
        attempts.append(time.monotonic())
        error = errors[min(len(attempts), len(errors)) - 1]
        raise NoHostAvailable("Unable to connect to any servers", {HOST: error})

    monkeypatch.setattr(connecting, "_connect_once", connect_once)
    return attempts


async def test_a_refused_login_ends_start_up_at_the_first_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts = failing_attempts(monkeypatch, WRONG_PASSWORD)
    with pytest.raises(StoreRefused) as caught:
        await connecting.connect([HOST], username="clockwork", password="x", timeout_s=120)
    assert len(attempts) == 1
    assert caught.value.setting == "password"
    assert str(caught.value).startswith(f"Cassandra at {HOST} refused this client: login refused")


async def test_a_closed_connection_is_given_one_more_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connecting, "tls_context", lambda tls: None)
    attempts = failing_attempts(monkeypatch, CLOSED_AFTER_HANDSHAKE)
    with pytest.raises(StoreRefused) as caught:
        await connecting.connect([HOST], tls=CA_ONLY, timeout_s=120)
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] < 1.0
    assert caught.value.setting == "tls.cert_file"


async def test_a_node_going_down_once_is_retried_as_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connecting, "tls_context", lambda tls: None)
    refused = ConnectionRefusedError(111, "Connection refused")
    attempts = failing_attempts(monkeypatch, CLOSED_AFTER_HANDSHAKE, refused)
    with pytest.raises(StoreUnavailable, match="unreachable"):
        await connecting.connect([HOST], tls=CA_ONLY, timeout_s=0.8)
    assert len(attempts) >= 2


async def test_a_plain_text_client_reset_by_a_tls_node_is_told_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing_attempts(monkeypatch, ConnectionResetError(104, "Connection reset by peer"))
    with pytest.raises(StoreUnavailable, match="resets plain-text connections"):
        await connecting.connect([HOST], timeout_s=0.3)


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_ca_file_that_cannot_be_loaded_names_the_ca_setting(
    tmp_path: Path, content: str | None
) -> None:
    ca = tmp_path / "ca.crt"
    if content is not None:
        ca.write_text(content)
    with pytest.raises(StoreRefused, match="cannot load the CA file") as caught:
        connecting.tls_context(CassandraTlsSettings(ca_file=ca))
    assert caught.value.setting == "tls.ca_file"


def test_tls_settings_refuse_a_key_without_a_certificate() -> None:
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        CassandraTlsSettings(key_file=Path("client.key"))
