"""Process settings: one frozen object built at start-up (by the CLI, from flags and
environment variables) and passed explicitly. Nothing reads the environment elsewhere
(the one variable read here, not by the CLI, is the test-only fencing switch below).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from clockwork_svc.api import DEFAULT_ADDRESS
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import Limits
from clockwork_svc.gc_policy import IDLE_THRESHOLD, YOUNG_THRESHOLD
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.server.grpc_server import MAX_IN_FLIGHT, MAX_MESSAGE_BYTES, TlsSettings
from clockwork_svc.worker.worker import WorkerSettings


@dataclass(frozen=True, slots=True)
class CassandraTlsSettings:
    """TLS to the nodes' native port (Cassandra's `client_encryption_options`). The
    files are read once, when the process connects."""

    # The CA that signed the nodes' certificates; None: the system's trusted roots.
    ca_file: Path | None = None
    # This client's certificate and key, for nodes with `require_client_auth: true`.
    cert_file: Path | None = None
    key_file: Path | None = None
    # Check that a node's certificate names the address connected to (its IP address,
    # or the host name given as contact point). Off, any certificate the CA signed passes.
    verify_hostname: bool = True

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("Cassandra TLS: cert_file and key_file go together")


@dataclass(frozen=True, slots=True)
class CassandraSettings:
    """Where the Cassandra store lives, and how to log in to it."""

    contact_points: tuple[str, ...] = ("127.0.0.1:9042",)
    keyspace: str = "clockwork"
    local_dc: str | None = None
    # A role of Cassandra's PasswordAuthenticator; None: the nodes ask for no login.
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # None: plain text (the nodes' client encryption off).
    tls: CassandraTlsSettings | None = None
    # How long start-up keeps retrying an unreachable cluster before giving up. A
    # refused login or certificate is not retried: it ends start-up at once.
    connect_timeout_s: float = 120.0
    # Most per-firing upserts coalesced into one batch request (1: each sent alone).
    write_batch: int = 128
    # How long a worker gathers its per-firing upserts, and its schedule reads (read
    # ahead of the due time), into one request (0: one event-loop turn's worth).
    batch_linger_ms: float = 20.0
    # A read or idempotent write not answered within this many ms is also sent to
    # another node, and the first answer wins (0: never): a node its clients cannot
    # reach, or a slow one, then holds a request up this long instead of until the
    # request timeout (10 s).
    speculative_delay_ms: float = 200.0


@dataclass(frozen=True, slots=True)
class StoreSettings:
    kind: str = "sqlite"  # "sqlite" | "cassandra"
    sqlite_path: Path = Path(".clockwork/clockwork.db")
    cassandra: CassandraSettings = field(default_factory=CassandraSettings)


@dataclass(frozen=True, slots=True)
class LayoutSettings:
    """Applied only when a cluster (keyspace or SQLite file) is created; fixed afterwards."""

    # A cluster's (`clockwork schema migrate`): the most workers that can share the
    # firings, so sized for growth (docs/operations.md, "Sizing the cluster layout").
    shard_count: int = 256
    # Width of a firings partition; sized so a partition stays well under 100k rows.
    bucket_ms: int = 60_000


DEV_SHARD_COUNT = 16
"""Shard count of a new `clockwork dev` data dir, lower than a cluster's
(`LayoutSettings.shard_count`): its one process owns every shard, no other worker can
take any, and each owned shard costs a read every second even when idle."""


DEV_HTTP_LISTEN = "127.0.0.1:7080"
"""Where `clockwork dev` serves the HTTP/JSON API unless told otherwise."""
HTTP_PORT = 7080


@dataclass(frozen=True, slots=True)
class ApiSettings:
    listen: str = DEFAULT_ADDRESS
    # (host, port) of the HTTP/JSON API (`--http-listen`); None: gRPC only.
    http_listen: tuple[str, int] | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings | None = None
    limits: Limits = field(default_factory=Limits)
    shutdown_grace_s: float = 10.0
    # How long a token lookup is cached (a revocation takes effect within this).
    token_cache_s: float = 10.0
    # Largest request or response; larger requests are refused RESOURCE_EXHAUSTED.
    max_message_bytes: int = MAX_MESSAGE_BYTES
    # Calls handled at once; above it, calls are refused UNAVAILABLE with a retry hint.
    max_in_flight: int = MAX_IN_FLIGHT


@dataclass(frozen=True, slots=True)
class OpsSettings:
    """The /metrics, /healthz and /readyz endpoint, logging, and the process's garbage
    collector."""

    host: str = "127.0.0.1"
    port: int = 9464
    log_level: str = "INFO"
    log_json: bool | None = None
    # Allocations between young-generation collections (clockwork_svc/gc_policy.py):
    # lower for a tighter lag tail, higher for throughput.
    gc_young_threshold: int = YOUNG_THRESHOLD
    # A worker collects early, while it has nothing to send, once the young generation
    # holds this many allocations (0: only at the young threshold).
    gc_idle_threshold: int = IDLE_THRESHOLD
    # OTLP/HTTP collector base URL for spans (api calls, deliveries); None: no spans
    # (the W3C trace context still travels on callbacks).
    otlp_endpoint: str | None = None


UNSAFE_DISABLE_FENCING_ENV = "CLOCKWORK_UNSAFE_DISABLE_FENCING_FOR_TESTS"
"""UNSAFE, for tests only: set to 1 to switch off the worker's fencing (see
`ProcessSettings.unsafe_disable_fencing_for_tests`). Deliberately not a CLI flag."""


def _unsafe_fencing_disabled() -> bool:
    return os.environ.get(UNSAFE_DISABLE_FENCING_ENV, "") == "1"


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class EtcdTlsSettings:
    """TLS to the etcd members (their client URLs are https). The files are read at each
    connection, so a renewed certificate is used from the next one on."""

    # The CA that signed the members' certificates; None: the system's trusted roots.
    ca_file: Path | None = None
    # This client's certificate and key, for a member run with --client-cert-auth. With
    # authentication on and no password, the certificate's CN is the etcd user.
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("etcd TLS: cert_file and key_file go together")


@dataclass(frozen=True, slots=True)
class EtcdSecurity:
    """How Clockwork connects to etcd: TLS or plain text, and as which etcd user (a
    password, else the CN of the TLS client certificate, else none: auth off)."""

    tls: EtcdTlsSettings | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError("etcd auth: username and password go together")


@dataclass(frozen=True, slots=True)
class EtcdSettings:
    """Shard ownership through etcd leases (clockwork_svc/coordination/etcd.py)."""

    endpoint: str = "127.0.0.1:2379"
    security: EtcdSecurity = field(default_factory=EtcdSecurity)
    cluster: str = "default"
    lease_ttl_s: int = 6
    # Stop dispatching this long before the lease could expire.
    safety_margin_s: float = 1.5
    # Upper bound on shards acquired per rebalance round (0: no bound).
    max_acquire_per_round: int = 0
    rebalance_interval_s: float = 2.0
    # How often a worker publishes its load report (read by GetClusterLoad).
    load_report_interval_s: float = 5.0
    worker_id: str = field(default_factory=_default_worker_id)

    @property
    def prefix(self) -> str:
        return f"/clockwork/{self.cluster}/"

    @property
    def load_prefix(self) -> str:
        """Load reports live outside `prefix`: the coordinator watches `prefix`, and a
        report every few seconds per worker must not wake every worker's rebalancing."""
        return f"/clockwork-load/{self.cluster}/"


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    store: StoreSettings = field(default_factory=StoreSettings)
    layout: LayoutSettings = field(default_factory=LayoutSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    ops: OpsSettings = field(default_factory=OpsSettings)
    targets: AddressPolicy = field(default_factory=AddressPolicy)
    # None: this worker owns every shard (single worker, or `clockwork dev`).
    etcd: EtcdSettings | None = None
    # Kafka bootstrap servers for Kafka targets ("host:port[,host:port]"); None: a
    # firing with a Kafka target fails permanently with a clear error.
    kafka: str | None = None
    # UNSAFE, TESTS ONLY ("test the test", tests/nemesis/test_fencing_switch.py): the
    # worker ignores its lease deadline when dispatching and the store's epoch fence on
    # cursor writes, so a stale owner keeps firing. Only from the environment variable
    # UNSAFE_DISABLE_FENCING_ENV=1; the worker logs a warning at start-up when it is on.
    unsafe_disable_fencing_for_tests: bool = field(default_factory=_unsafe_fencing_disabled)
