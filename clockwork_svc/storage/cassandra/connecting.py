"""Connecting to a Cassandra cluster: driver configuration and start-up retries.

Building a `Cluster` resolves contact points (DNS) and `connect()` blocks until the
control connection is up, so both run in a worker thread; the event loop only awaits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

from clockwork_svc.errors import StoreUnavailable

log = logging.getLogger(__name__)

DEFAULT_PORT = 9042

# Execution profiles, one per kind of request.
PROFILE_DEFAULT = EXEC_PROFILE_DEFAULT
"""Plain reads and idempotent upserts: LOCAL_QUORUM."""
PROFILE_LWT = "clockwork-lwt"
"""Compare-and-set writes: LOCAL_QUORUM commit, LOCAL_SERIAL Paxos; a longer timeout
because a Paxos round is four round trips."""
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


def _auth_failure(exc: BaseException) -> bool:
    if isinstance(exc, AuthenticationFailed):
        return True
    errors = getattr(exc, "errors", None) or {}
    return isinstance(exc, NoHostAvailable) and any(
        isinstance(e, AuthenticationFailed) for e in errors.values()
    )


async def connect(
    contact_points: Sequence[str],
    *,
    local_dc: str | None = None,
    username: str | None = None,
    password: str | None = None,
    timeout_s: float = 60.0,
    speculative_delay_s: float = 0.0,
) -> tuple[Any, Any]:
    """Return `(cluster, session)`, retrying an unreachable cluster until `timeout_s`.

    Each failed attempt logs one warning line; backoff doubles from 0.25s up to 5s.
    Raises `StoreUnavailable` naming the addresses once the time is up, or at once on
    an authentication failure (retrying cannot fix a wrong password).
    """
    if not contact_points:
        raise ValueError("no Cassandra contact points given")
    points = [parse_contact_point(p) for p in contact_points]
    where = ", ".join(f"{h}:{p}" for h, p in points)
    credentials = Credentials(username, password or "") if username else None
    deadline = time.monotonic() + timeout_s
    delay = _BACKOFF_INITIAL_S
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        per_attempt = max(0.5, min(_ATTEMPT_CONNECT_TIMEOUT_S, remaining))
        try:
            return await asyncio.to_thread(
                _connect_once, points, local_dc, credentials, per_attempt, speculative_delay_s
            )
        except _UNREACHABLE as exc:
            if _auth_failure(exc):
                raise StoreUnavailable(f"Cassandra at {where}: authentication failed") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StoreUnavailable(
                    f"Cassandra unreachable at {where} after {attempt} attempt(s) "
                    f"in {timeout_s:g}s: {_summary(exc)}"
                ) from exc
            pause = min(delay, remaining)
            log.warning(
                "Cassandra unreachable at %s (attempt %d, retrying in %.2fs): %s",
                where,
                attempt,
                pause,
                _summary(exc),
            )
            await asyncio.sleep(pause)
            delay = min(delay * 2, _BACKOFF_MAX_S)
        except AuthenticationFailed as exc:
            raise StoreUnavailable(f"Cassandra at {where}: authentication failed") from exc


def _summary(exc: BaseException) -> str:
    """One line: NoHostAvailable's message embeds a dict of per-host errors."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, dict) and errors:
        first = next(iter(errors.values()))
        return f"{type(exc).__name__}: {type(first).__name__}: {first}".replace("\n", " ")
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


async def shutdown(cluster: Any) -> None:
    """`Cluster.shutdown` joins driver threads: keep it off the event loop."""
    await asyncio.to_thread(cluster.shutdown)
