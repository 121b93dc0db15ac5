"""A single Cassandra node secured as production runs it: TLS on the native port
(required, no plain-text fallback), PasswordAuthenticator, CassandraAuthorizer, and
a ``clockwork`` login role with only the permissions Clockwork needs.

The certificates are the harness's own (``pki.make_pki``), made once per state dir
in ``<state>/cassandra-secure/pki``: ``ca.crt`` (the CA the node and Clockwork
trust), ``server.crt``/``server.key`` (the node's, for 127.0.0.1-4 and localhost)
and ``client.crt``/``client.key`` (Clockwork's, for mutual TLS). Cassandra reads
PEM files through ``PEMBasedSslContextFactory``: its key store is the node's key and
certificate in one file, its trust store the CA.

Usage from a pytest fixture::

    from e2e.infra import cassandra_secure

    node = cassandra_secure.start(tmp_path)     # Running
    certs = cassandra_secure.pki_of(tmp_path)    # ca, client_cert, client_key
    ...
    node.destroy()

Compared with the plain test node it runs a smaller heap (it serves a few
connections, not benchmarks) and creates its roles once the node answers.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import cql, pki
from .cassandra import DEFAULT_COMMITLOG_SYNC, Cassandra, CommitlogSync, _q
from .server import LaunchSpec, ProbeError, Running

log = logging.getLogger(__name__)

ENV_VAR = "CLOCKWORK_CASSANDRA_SECURE"
HEAP = "512m"
PROVISION_TIMEOUT_S = 60.0
CA_NAME = "clockwork-test-cassandra-ca"

SUPERUSER = cql.Login("cassandra", "cassandra")
"""The superuser Cassandra creates on its first start. The harness uses it only to
create the roles below; a production cluster replaces it."""
CLOCKWORK = cql.Login("clockwork", "clockwork-test-password")
"""The role Clockwork logs in as."""
GRANTS = (
    "GRANT CREATE ON ALL KEYSPACES TO clockwork",
    "GRANT SELECT ON system_views.settings TO clockwork",
)
"""CREATE lets ``clockwork schema migrate`` create its keyspace; Cassandra gives the
creator of a keyspace every permission on it. Reading the node's settings is for the
benchmarks' report of the commit log setting (bench/durability.py): Clockwork itself
never reads them, and a production role needs only the first grant."""


@dataclass(frozen=True)
class Pki:
    """Paths of the node's test certificates."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.dir / "client.key"

    @property
    def server_pem(self) -> Path:
        """Key and certificate in one file: the PEM key store Cassandra reads."""
        return self.dir / "server.pem"

    def client_context(self) -> ssl.SSLContext:
        """What a client with the client certificate needs (the harness's own probe)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


class SecureCassandra(Cassandra):
    """One node on 127.0.0.1 with client encryption, authentication and authorization on."""

    name = "cassandra-secure"
    env_var = ENV_VAR

    def __init__(
        self,
        state_dir: Path | None = None,
        cache_dir: Path | None = None,
        *,
        require_client_auth: bool = True,
        heap: str = HEAP,
        commitlog_sync: CommitlogSync = DEFAULT_COMMITLOG_SYNC,
    ) -> None:
        """``require_client_auth``: the node refuses clients without a certificate its CA signed."""
        super().__init__(state_dir, cache_dir, heap=heap, commitlog_sync=commitlog_sync)
        self.require_client_auth = require_client_auth

    @property
    def pki(self) -> Pki:
        return Pki(self.dir / "pki")

    def make_pki(self) -> Pki:
        """The node's certificates, made on first use and kept across restarts."""
        found = self.pki
        if not found.server_pem.is_file():
            pki.make_pki(found.dir, CA_NAME)
            text = found.server_key.read_text() + found.server_cert.read_text()
            found.server_pem.write_text(text)
        return found

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        self.make_pki()
        return super().configure(ports)

    def _yaml(self, ports: Mapping[str, int]) -> str:
        found = self.pki
        client_auth = "true" if self.require_client_auth else "false"
        return (
            super()._yaml(ports)
            + f"""\
# Secured (e2e/infra/cassandra_secure.py): logins, permissions, TLS only.
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
client_encryption_options:
  enabled: true
  optional: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {_q(found.server_pem)}
  truststore: {_q(found.ca)}
  require_client_auth: {client_auth}
"""
        )

    def probe(self, port: int, timeout: float) -> str:
        """Ready when the superuser can log in over TLS and read ``system.local``."""
        try:
            return cql.release_version(
                self.host, port, timeout, tls=self.pki.client_context(), login=SUPERUSER
            )
        except cql.CqlError as exc:
            raise ProbeError(str(exc)) from exc

    def start(self, timeout: float | None = None) -> Running:
        """Start (or reuse) the node, then make sure Clockwork's role exists."""
        running = super().start(timeout)
        self.provision(running.port)
        return running

    def provision(self, port: int, system_auth_replication: int | None = None) -> None:
        """Create the ``clockwork`` role and its grants (idempotent).

        ``system_auth_replication``: first give the roles' keyspace this replication
        factor (a cluster's: at Cassandra's default of 1, a login fails whenever the
        one node holding the role is down) and write the superuser's row again, so
        that every replica holds it."""
        context = self.pki.client_context()
        statements: list[str] = []
        if system_auth_replication is not None:
            statements += [
                "ALTER KEYSPACE system_auth WITH replication = "
                f"{{'class': 'SimpleStrategy', 'replication_factor': {system_auth_replication}}}",
                f"ALTER ROLE {SUPERUSER.role} WITH PASSWORD = '{SUPERUSER.password}'",
            ]
        statements += [
            f"CREATE ROLE IF NOT EXISTS {CLOCKWORK.role} "
            f"WITH PASSWORD = '{CLOCKWORK.password}' AND LOGIN = true",
            *GRANTS,
        ]
        # Every statement is idempotent. A login reads the superuser's role at QUORUM:
        # just after the roles' keyspace gains replicas, two of them may not hold it
        # yet and refuse the login, until the ALTER ROLE above has rewritten it.
        deadline = time.monotonic() + PROVISION_TIMEOUT_S
        while True:
            try:
                cql.execute_all(self.host, port, statements, 60.0, tls=context, login=SUPERUSER)
                break
            except cql.CqlError as exc:
                if time.monotonic() > deadline:
                    raise
                log.info("%s: provisioning refused (%s); trying again", self.name, exc)
                time.sleep(2.0)
        log.info("%s: role %s provisioned", self.name, CLOCKWORK.role)

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        """Where the node is, and what a client needs to reach it: each of Clockwork's
        own variables with ``_SECURE`` inserted (``CLOCKWORK_CASSANDRA_SECURE_TLS_CA``
        for ``CLOCKWORK_CASSANDRA_TLS_CA``), so they never stand in for the plain node's."""
        return {
            ENV_VAR: f"{self.host}:{ports[self.port_names[0]]}",
            **client_env(ENV_VAR, self.pki),
        }


def client_env(env_var: str, found: Pki) -> dict[str, str]:
    """What a client needs beside the addresses in ``env_var``: its variables with
    Clockwork's suffixes (``<env_var>_TLS_CA`` for ``--cassandra-tls-ca``; e2e/stores.py)."""
    return {
        f"{env_var}_TLS_CA": str(found.ca),
        f"{env_var}_TLS_CERT": str(found.client_cert),
        f"{env_var}_TLS_KEY": str(found.client_key),
        f"{env_var}_USER": CLOCKWORK.role,
        f"{env_var}_PASSWORD": CLOCKWORK.password,
    }


# --- module-level API (what fixtures and the CLI call) -------------------------


def start(
    state_dir: Path | None = None,
    cache_dir: Path | None = None,
    *,
    timeout: float | None = None,
    require_client_auth: bool = True,
) -> Running:
    """Fetch if needed, start (or reuse) the node in ``<state_dir>/cassandra-secure``,
    wait until the superuser can log in, create Clockwork's role."""
    server = SecureCassandra(state_dir, cache_dir, require_client_auth=require_client_auth)
    return server.start(timeout)


def pki_of(state_dir: Path | None = None) -> Pki:
    """The certificates of the node in ``state_dir`` (made when it first started)."""
    return SecureCassandra(state_dir).pki


def stop(state_dir: Path | None = None, *, keep_data: bool = False) -> None:
    """Stop the node; delete its state (and certificates) unless ``keep_data``."""
    SecureCassandra(state_dir).down(keep_data=keep_data)
