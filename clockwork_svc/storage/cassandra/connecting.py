"""Connecting to a Cassandra cluster: driver configuration, TLS, and start-up retries.

Building a `Cluster` resolves contact points (DNS) and `connect()` blocks until the
control connection is up, so both run in a worker thread; the event loop only awaits.

Start-up retries a cluster it cannot reach, but not one that refuses it: a wrong
password or a certificate the other side does not trust fails the same way on every
attempt, so it ends start-up at once with `StoreRefused` naming the setting to check.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cassandra import AuthenticationFailed, ConsistencyLevel, OperationTimedOut, ProtocolVersion
from cassandra import UnresolvableContactPoints as _Unresolvable
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.policies import (
    ConstantSpeculativeExecutionPolicy,
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.query import dict_factory

from clockwork_svc.errors import StoreRefused, StoreUnavailable

if TYPE_CHECKING:
    from clockwork_svc.settings import CassandraTlsSettings

log = logging.getLogger(__name__)

DEFAULT_PORT = 9042

# Execution profiles, one per kind of request.
PROFILE_DEFAULT = EXEC_PROFILE_DEFAULT
"""Plain reads and idempotent upserts: LOCAL_QUORUM."""
PROFILE_LWT = "clockwork-lwt"
"""Compare-and-set writes: LOCAL_QUORUM commit, LOCAL_SERIAL Paxos; a longer timeout
because a Paxos round is four round trips (two with `paxos_variant: v2`)."""
PROFILE_SERIAL_READ = "clockwork-serial-read"
"""Linearizable reads (LOCAL_SERIAL) of rows written by compare-and-set."""
PROFILE_SCHEMA = "clockwork-schema"
"""DDL: the driver waits for schema agreement inside the request."""

_REQUEST_TIMEOUT_S = 10.0
# One more node tried (token-aware: another replica) for a request that is slow.
_SPECULATIVE_ATTEMPTS = 1
_LWT_TIMEOUT_S = 15.0
_SCHEMA_TIMEOUT_S = 120.0
# The driver's own per-attempt limits (TCP connect, control connection queries).
_ATTEMPT_CONNECT_TIMEOUT_S = 5.0
_BACKOFF_INITIAL_S = 0.25
_BACKOFF_MAX_S = 5.0

# Errors that mean "not reachable (yet)": worth retrying at start-up.
_UNREACHABLE = (NoHostAvailable, OperationTimedOut, ConnectionException, _Unresolvable, OSError)


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str


def tls_context(tls: CassandraTlsSettings) -> ssl.SSLContext:
    """The client side of TLS to the nodes: their certificates must chain to
    `tls.ca_file` (else the system's roots) and, unless `tls.verify_hostname` is off,
    name the address connected to; TLS 1.2 at least.

    Raises `StoreRefused` naming the file that cannot be loaded."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise StoreRefused(
            f"Cassandra TLS: cannot load the CA file {tls.ca_file}: {_reason(exc)}",
            "tls.ca_file",
        ) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = tls.verify_hostname
    if tls.cert_file is not None and tls.key_file is not None:
        try:
            # An empty password: an encrypted key fails here instead of OpenSSL
            # prompting for its password on the terminal.
            context.load_cert_chain(tls.cert_file, tls.key_file, password="")
        except (OSError, ssl.SSLError) as exc:
            raise StoreRefused(
                f"Cassandra TLS: cannot load the client certificate {tls.cert_file} with the "
                f"key {tls.key_file} (a PEM certificate and its own key, not encrypted): "
                f"{_reason(exc)}",
                "tls.cert_file",
            ) from exc
    return context


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a node turned this client away for good, and the setting to check.

    `certain`: the same answer on every attempt. A node that closes the connection
    right after the TLS handshake refuses the client's certificate (or its lack of
    one) under TLS 1.3, but a node going down does the same once; `connect` gives
    up on that only when the next attempt meets it again."""

    reason: str
    setting: str
    certain: bool = True


_NOT_TRUSTED = "CERTIFICATE_VERIFY_FAILED"
AUTHENTICATION_NOT_CHECKED = "Unable to perform authentication"
"""How Cassandra words a login it could not check (reading the role from
`system_auth` failed: too few of its replicas up, or a timeout), as opposed to
"Provided username ... and/or password are incorrect"."""
_SSL_SOURCE = re.compile(r"\s*\(_ssl\.c:\d+\)")
_NAME_MISMATCH = ("Hostname mismatch", "IP address mismatch")


def refusal(error: BaseException, tls: CassandraTlsSettings | None) -> Refusal | None:
    """What one host's connection error says (`NoHostAvailable.errors` holds one per
    contact point): a `Refusal`, or None for an error worth retrying (unreachable,
    reset, timed out).

    The driver re-raises an error of the TLS handshake as a plain `OSError` that keeps
    only OpenSSL's message, so those are told apart by its text. An `ssl.SSLError`
    itself comes after the handshake: under TLS 1.3 a node that turns the client's
    certificate (or its lack of one) down says so on the first read."""
    if isinstance(error, AuthenticationFailed):
        if AUTHENTICATION_NOT_CHECKED in str(error):
            return None  # the node could not read the role: a quorum of it is down
        if "requires authentication" in str(error):
            return Refusal("the nodes require a login (PasswordAuthenticator)", "username")
        return Refusal(f"login refused: {_server_message(error)}", "password")
    text = str(error)
    if _NOT_TRUSTED in text:
        detail = _SSL_SOURCE.sub("", text.rpartition("certificate verify failed: ")[2])
        if any(mark in text for mark in _NAME_MISMATCH):
            return Refusal(
                f"the node's certificate does not name the address connected to ({detail})",
                "tls.verify_hostname",
            )
        return Refusal(f"the node's certificate is not trusted ({detail})", "tls.ca_file")
    if tls is None:
        return None
    if isinstance(error, ssl.SSLError) or "ALERT" in text:
        closed = isinstance(error, ssl.SSLEOFError)
        detail = "it closed the connection after the TLS handshake" if closed else _reason(error)
        if tls.cert_file is None:
            why = "the node requires a client certificate"
        else:
            why = "the node refused the client certificate"
        return Refusal(f"{why} ({detail})", "tls.cert_file", certain=not closed)
    if "[SSL" in text:
        return Refusal(
            f"TLS handshake failed ({_reason(error)}): is client encryption on at the node?",
            "tls",
        )
    return None


def _server_message(error: BaseException) -> str:
    """`AuthenticationFailed`'s text without the driver's prefixes."""
    text = str(error)
    marker = 'message="'
    if marker in text:
        return text.split(marker, 1)[1].rstrip('"')
    return text


def _reason(exc: BaseException) -> str:
    """An `OSError`/`SSLError` as one short line: OpenSSL's words, without the errno,
    the driver's "Tried connecting to ..." and the `(_ssl.c:NNNN)` source line."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = text.rpartition("Last error: ")[2]
    return _SSL_SOURCE.sub("", text).replace("\n", " ").strip()


def refusals(exc: BaseException, tls: CassandraTlsSettings | None) -> dict[str, Refusal]:
    """The refusals among a failed attempt's errors, by host (`NoHostAvailable` holds
    one error per contact point)."""
    errors = getattr(exc, "errors", None)
    per_host = errors if isinstance(errors, dict) and errors else {"": exc}
    found = {str(host): refusal(error, tls) for host, error in per_host.items()}
    return {host: r for host, r in found.items() if r is not None}


def parse_contact_point(point: str) -> tuple[str, int]:
    """`host:port`, `[v6addr]:port` or a bare `host` (port 9042)."""
    text = point.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad Cassandra contact point {point!r}")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"bad Cassandra contact point {point!r}")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port in Cassandra contact point {point!r}")
    return host, int(port_text)


def _profiles(local_dc: str | None, speculative_delay_s: float) -> dict[Any, ExecutionProfile]:
    def profile(**kw: Any) -> ExecutionProfile:
        # A fresh policy per profile: the driver populates each profile's policy itself.
        lbp = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=local_dc))
        return ExecutionProfile(load_balancing_policy=lbp, row_factory=dict_factory, **kw)

    # The driver only ever repeats statements marked idempotent: reads and upserts,
    # never a compare-and-set.
    speculative = (
        ConstantSpeculativeExecutionPolicy(speculative_delay_s, _SPECULATIVE_ATTEMPTS)
        if speculative_delay_s > 0
        else None
    )
    return {
        PROFILE_DEFAULT: profile(
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=_REQUEST_TIMEOUT_S,
            speculative_execution_policy=speculative,
        ),
        PROFILE_LWT: profile(
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=_LWT_TIMEOUT_S,
        ),
        PROFILE_SERIAL_READ: profile(
            consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=_LWT_TIMEOUT_S,
        ),
        PROFILE_SCHEMA: profile(
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=_SCHEMA_TIMEOUT_S,
        ),
    }


class _QuietAttempt(logging.Filter):
    """Drops the driver's multi-line traceback for a failed connection attempt made by
    one thread: `connect` logs each failed attempt as one line of its own."""

    _NOISE = ("[control connection] Error connecting to", "Control connection failed to connect")

    def __init__(self) -> None:
        super().__init__()
        self._thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.thread == self._thread and str(record.msg).startswith(self._NOISE))


def _connect_once(
    points: list[tuple[str, int]],
    local_dc: str | None,
    credentials: Credentials | None,
    ssl_context: ssl.SSLContext | None,
    attempt_timeout_s: float,
    speculative_delay_s: float,
) -> tuple[Any, Any]:
    """Blocking: build a Cluster and open a Session (no keyspace; CQL names it)."""
    auth = (
        PlainTextAuthProvider(username=credentials.username, password=credentials.password)
        if credentials
        else None
    )
    cluster = Cluster(
        contact_points=points,
        # Cassandra 4.0+ speaks v5; pinning it avoids a noisy downgrade handshake.
        protocol_version=ProtocolVersion.V5,
        execution_profiles=_profiles(local_dc, speculative_delay_s),
        auth_provider=auth,
        ssl_context=ssl_context,
        connect_timeout=attempt_timeout_s,
        control_connection_timeout=attempt_timeout_s,
        max_schema_agreement_wait=60,
        # The driver's default backs off to 10 minutes: after a 15 s outage the next
        # attempt can come 16 s after the node is back, and every firing due meanwhile
        # waits for it. Capped at 5 s, a restarted node is back in use within 5 s.
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=5.0),
    )
    driver_log = logging.getLogger("cassandra.cluster")
    quiet = _QuietAttempt()
    driver_log.addFilter(quiet)
    try:
        session = cluster.connect()
    except BaseException:
        cluster.shutdown()
        raise
    finally:
        driver_log.removeFilter(quiet)
    return cluster, session


async def connect(
    contact_points: Sequence[str],
    *,
    local_dc: str | None = None,
    username: str | None = None,
    password: str | None = None,
    tls: CassandraTlsSettings | None = None,
    timeout_s: float = 60.0,
    speculative_delay_s: float = 0.0,
) -> tuple[Any, Any]:
    """Return `(cluster, session)`, retrying an unreachable cluster until `timeout_s`.

    Each failed attempt logs one warning line; backoff doubles from 0.25s up to 5s.
    Raises `StoreUnavailable` naming the addresses once the time is up, and
    `StoreRefused` at once when a node refuses the login or a certificate, or a TLS
    file cannot be loaded (see `refusal`): retrying cannot fix those.
    """
    if not contact_points:
        raise ValueError("no Cassandra contact points given")
    points = [parse_contact_point(p) for p in contact_points]
    where = ", ".join(f"{h}:{p}" for h, p in points)
    credentials = Credentials(username, password or "") if username else None
    ssl_context = tls_context(tls) if tls is not None else None
    deadline = time.monotonic() + timeout_s
    delay = _BACKOFF_INITIAL_S
    attempt = 0
    refused_before = False
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        per_attempt = max(0.5, min(_ATTEMPT_CONNECT_TIMEOUT_S, remaining))
        try:
            return await asyncio.to_thread(
                _connect_once,
                points,
                local_dc,
                credentials,
                ssl_context,
                per_attempt,
                speculative_delay_s,
            )
        except (*_UNREACHABLE, AuthenticationFailed) as exc:
            refused = refusals(exc, tls)
            if refused:
                host, why = next(iter(refused.items()))
                if why.certain or refused_before:
                    raise StoreRefused(
                        f"Cassandra at {host or where} refused this client: {why.reason}",
                        why.setting,
                    ) from exc
            refused_before = bool(refused)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StoreUnavailable(
                    f"Cassandra unreachable at {where} after {attempt} attempt(s) "
                    f"in {timeout_s:g}s: {_summary(exc, tls)}"
                ) from exc
            pause = min(delay, remaining)
            log.warning(
                "Cassandra unreachable at %s (attempt %d, retrying in %.2fs): %s",
                where,
                attempt,
                pause,
                _summary(exc, tls),
            )
            await asyncio.sleep(pause)
            delay = min(delay * 2, _BACKOFF_MAX_S)


def _summary(exc: BaseException, tls: CassandraTlsSettings | None = None) -> str:
    """One line: NoHostAvailable's message embeds a dict of per-host errors."""
    errors = getattr(exc, "errors", None)
    first = next(iter(errors.values())) if isinstance(errors, dict) and errors else None
    if first is None:
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = f"{type(exc).__name__}: {type(first).__name__}: {first}"
    if tls is None and isinstance(first or exc, ConnectionResetError):
        text += " (a node that requires TLS resets plain-text connections)"
    return text.replace("\n", " ")


async def shutdown(cluster: Any) -> None:
    """`Cluster.shutdown` joins driver threads: keep it off the event loop."""
    await asyncio.to_thread(cluster.shutdown)
