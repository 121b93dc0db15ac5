"""Where the stores a test, nemesis or benchmark uses are, and how to reach them.

The harness publishes each server's address in one variable (``CLOCKWORK_CASSANDRA``,
``CLOCKWORK_CASSANDRA_CLUSTER``, ``CLOCKWORK_ETCD_CLUSTER``, ...) and, for a secured
one, its credentials beside it under the same name with Clockwork's suffixes
(``CLOCKWORK_CASSANDRA_CLUSTER_TLS_CA`` is what ``--cassandra-tls-ca`` needs). An
access object reads such a set of variables and gives it back as what each consumer
takes: Clockwork's own environment variables for a ``clockwork`` process, keyword
arguments for the store's Python API, an SSL context and login for the harness's
probes.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clockwork_svc.settings import CassandraTlsSettings, EtcdSecurity, EtcdTlsSettings
from clockwork_svc.storage.cassandra.connecting import tls_context
from e2e.infra import cql

TLS_SUFFIXES = ("_TLS_CA", "_TLS_CERT", "_TLS_KEY")
LOGIN_SUFFIXES = ("_USER", "_PASSWORD")


TlsFiles = tuple[Path | None, Path | None, Path | None]
"""CA, client certificate, client key."""


def _tls_files(environ: Mapping[str, str], var: str) -> TlsFiles:
    """``var``'s ``_TLS_CA``/``_TLS_CERT``/``_TLS_KEY`` companions (unset: None)."""
    values = (environ.get(var + suffix, "") for suffix in TLS_SUFFIXES)
    ca, cert, key = (Path(value) if value else None for value in values)
    return ca, cert, key


def _tls_env(prefix: str, files: TlsFiles) -> dict[str, str]:
    """Clockwork's ``<prefix>_TLS_*`` variables for the files that are set."""
    return {
        prefix + suffix: str(path)
        for suffix, path in zip(TLS_SUFFIXES, files, strict=True)
        if path is not None
    }


@dataclass(frozen=True)
class CassandraAccess:
    """Contact points, and the login and TLS a secured cluster asks for."""

    contact_points: tuple[str, ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: CassandraTlsSettings | None = None

    @classmethod
    def of(cls, value: str | CassandraAccess) -> CassandraAccess:
        """``value`` as it is, or plain-text access to the addresses it lists."""
        if isinstance(value, CassandraAccess):
            return value
        return cls(tuple(point for point in value.split(",") if point))

    @classmethod
    def from_env(cls, var: str, environ: Mapping[str, str] = os.environ) -> CassandraAccess:
        """``var`` (the addresses) and its ``_USER``/``_PASSWORD``/``_TLS_*`` companions."""
        tls = None
        ca, cert, key = _tls_files(environ, var)
        if ca or cert:
            tls = CassandraTlsSettings(ca_file=ca, cert_file=cert, key_file=key)
        return cls(
            cls.of(environ.get(var, "")).contact_points,
            username=environ.get(var + "_USER") or None,
            password=environ.get(var + "_PASSWORD") or None,
            tls=tls,
        )

    @property
    def address(self) -> str:
        return ",".join(self.contact_points)

    def env(self) -> dict[str, str]:
        """Clockwork's environment variables for this access (``--cassandra*`` flags)."""
        found = {"CLOCKWORK_CASSANDRA": self.address}
        if self.username is not None:
            found["CLOCKWORK_CASSANDRA_USER"] = self.username
        if self.password is not None:
            found["CLOCKWORK_CASSANDRA_PASSWORD"] = self.password
        if self.tls is not None:
            found["CLOCKWORK_CASSANDRA_TLS"] = "true"
            files = (self.tls.ca_file, self.tls.cert_file, self.tls.key_file)
            found |= _tls_env("CLOCKWORK_CASSANDRA", files)
        return found

    def connect_kwargs(self) -> dict[str, Any]:
        """What ``connecting.connect``, ``schema.migrate`` and ``CassandraStore.open`` take."""
        return {"username": self.username, "password": self.password, "tls": self.tls}

    def ssl_context(self) -> ssl.SSLContext | None:
        return None if self.tls is None else tls_context(self.tls)

    def cql_login(self) -> cql.Login | None:
        if self.username is None:
            return None
        return cql.Login(self.username, self.password or "")


@dataclass(frozen=True)
class EtcdAccess:
    """Endpoints, and the TLS and user a secured etcd asks for."""

    endpoints: str
    security: EtcdSecurity = field(default_factory=EtcdSecurity)

    @classmethod
    def of(cls, value: str | EtcdAccess) -> EtcdAccess:
        return value if isinstance(value, EtcdAccess) else cls(value)

    @classmethod
    def from_env(cls, var: str, environ: Mapping[str, str] = os.environ) -> EtcdAccess:
        """``var`` (the endpoints) and its ``_TLS_*``/``_USER``/``_PASSWORD`` companions."""
        tls = None
        ca, cert, key = _tls_files(environ, var)
        if ca or cert:
            tls = EtcdTlsSettings(ca_file=ca, cert_file=cert, key_file=key)
        security = EtcdSecurity(
            tls=tls,
            username=environ.get(var + "_USER") or None,
            password=environ.get(var + "_PASSWORD") or None,
        )
        return cls(environ.get(var, ""), security)

    def env(self) -> dict[str, str]:
        """Clockwork's environment variables for this access (``--etcd*`` flags)."""
        found = {"CLOCKWORK_ETCD": self.endpoints}
        tls = self.security.tls
        if tls is not None:
            found |= _tls_env("CLOCKWORK_ETCD", (tls.ca_file, tls.cert_file, tls.key_file))
        if self.security.username is not None and self.security.password is not None:
            found["CLOCKWORK_ETCD_USER"] = self.security.username
            found["CLOCKWORK_ETCD_PASSWORD"] = self.security.password
        return found
