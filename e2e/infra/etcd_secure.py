"""A single etcd member secured as in production: TLS with client certificates, users
and roles (authentication on).

What it sets up, once, in its state dir:

* a CA and certificates (``pki/``, ``pki.make_pki``): ``server`` (the member's),
  ``clockwork`` and ``root`` (clients; etcd takes a client's user name from its
  certificate's CN when it sends no token), and ``stranger`` (a CN that is no user);
* the member serves clients only over https, with ``--client-cert-auth`` (a client
  without a certificate signed by the CA is refused in the TLS handshake);
* users ``root`` (root role, certificate only) and ``clockwork`` (password
  ``CLOCKWORK_PASSWORD``, or its certificate) and a role ``clockwork`` granted
  readwrite on the prefix ``KEY_PREFIX`` only, then ``auth enable``.

Auth setup is kept in the data dir, so ``restart()`` brings the same secured member
back (password tokens are forgotten: etcd's ``simple`` tokens live in memory).

Usage from a pytest fixture::

    from e2e.infra import etcd_secure

    member = etcd_secure.start(tmp_path)
    member.server.pki_dir / "clockwork.crt", etcd_secure.CLOCKWORK_PASSWORD
    member.kill(); member.restart()
    member.destroy()
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import pki
from .etcd import Etcd, http_json
from .server import InfraError, LaunchSpec, ProbeError, Running

ENV_VAR = "CLOCKWORK_ETCD_SECURE"

KEY_PREFIX = "/clockwork"
"""What the ``clockwork`` role may read and write: as a prefix it covers every
cluster's keys, ``/clockwork/<cluster>/`` and ``/clockwork-load/<cluster>/``
(``EtcdSettings.prefix`` and ``load_prefix`` in clockwork_svc/settings.py)."""

CLOCKWORK_USER = "clockwork"
CLOCKWORK_PASSWORD = "clockwork-test-password"  # test data only
CLIENT_LEAVES = ("clockwork", "root", "stranger")
_AUTH_MARKER = "auth-enabled"


class SecureEtcd(Etcd):
    """One member with https client URLs, client-certificate auth and users and roles."""

    name = "etcd-secure"
    env_var = ENV_VAR

    @property
    def pki_dir(self) -> Path:
        """``ca.crt``, and ``NAME.crt``/``NAME.key`` for ``server`` and ``CLIENT_LEAVES``."""
        return self.dir / "pki"

    def start(self, timeout: float | None = None) -> Running:
        """Start (or reuse) the member; on its first start, set up users and roles."""
        running = super().start(timeout)
        self.enable_auth_once(running.port, self.dir)
        return running

    def make_pki(self) -> None:
        """The certificates, made on first use and kept across restarts."""
        if not (self.pki_dir / "ca.crt").exists():
            pki.make_pki(self.pki_dir, "clockwork-etcd-test-ca", ("server", *CLIENT_LEAVES))

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        self.make_pki()
        client = f"https://{self.host}:{ports['client']}"
        return with_flags(
            super().configure(ports),
            # Loopback only, and only https: nothing answers in plain text.
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            "--client-cert-auth",
            f"--trusted-ca-file={self.pki_dir / 'ca.crt'}",
            f"--cert-file={self.pki_dir / 'server.crt'}",
            f"--key-file={self.pki_dir / 'server.key'}",
        )

    def probe(self, port: int, timeout: float) -> str:
        """Ready when ``/health`` (over https, as ``root``) says true.

        etcd's health check counts an authentication refusal as healthy, so this works
        before and after ``auth enable``; the KV read of the plain member's probe would
        need a user.
        """
        health = self._https_json(port, "/health", timeout)
        if health.get("health") != "true":
            raise ProbeError(f"/health says {health}")
        version = self._https_json(port, "/version", timeout).get("etcdserver", "?")
        return f"{version}, https, client certificates, auth"

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        """The address, and where the CA and client certificates are."""
        return {
            self.env_var: f"{self.host}:{ports['client']}",
            f"{self.env_var}_PKI": str(self.pki_dir),
        }

    def etcdctl(self, port: int, *args: str, user: str = "root") -> str:
        """Run etcdctl against the member as ``user`` (by its certificate); its stdout."""
        argv = [
            str(self.etcdctl_bin),
            f"--endpoints=https://{self.host}:{port}",
            f"--cacert={self.pki_dir / 'ca.crt'}",
            f"--cert={self.pki_dir / f'{user}.crt'}",
            f"--key={self.pki_dir / f'{user}.key'}",
            "--dial-timeout=3s",
            "--command-timeout=10s",
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise InfraError(f"etcd-secure: `etcdctl {' '.join(args)}` failed: {done.stderr}")
        return done.stdout

    def enable_auth_once(self, port: int, marker_dir: Path) -> None:
        """``enable_auth``, unless a marker file in ``marker_dir`` says it was done
        (etcd refuses to add a user twice; the setup lives in the data dir)."""
        marker = marker_dir / _AUTH_MARKER
        if not marker.exists():
            self.enable_auth(port)
            marker.write_text("root, clockwork role and user; auth on\n")

    def enable_auth(self, port: int) -> None:
        """Users and roles, then ``auth enable``."""
        steps = [
            ("role", "add", CLOCKWORK_USER),
            ("role", "grant-permission", CLOCKWORK_USER, "readwrite", KEY_PREFIX, "--prefix"),
            ("user", "add", CLOCKWORK_USER, f"--new-user-password={CLOCKWORK_PASSWORD}"),
            ("user", "grant-role", CLOCKWORK_USER, CLOCKWORK_USER),
            ("user", "add", "root", "--no-password"),
            ("user", "grant-role", "root", "root"),
            ("auth", "enable"),
        ]
        for step in steps:
            self.etcdctl(port, *step)

    def _https_json(self, port: int, path: str, timeout: float) -> dict[str, Any]:
        context = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        context.load_cert_chain(self.pki_dir / "root.crt", self.pki_dir / "root.key")
        return http_json(f"https://{self.host}:{port}{path}", None, timeout, context)


def with_flags(spec: LaunchSpec, *flags: str) -> LaunchSpec:
    """``spec`` with ``flags`` added, each replacing any flag of the same name."""
    names = tuple(flag.partition("=")[0] + "=" for flag in flags if "=" in flag)
    kept = [arg for arg in spec.argv if not arg.startswith(names)]
    return LaunchSpec(argv=(*kept, *flags), cwd=spec.cwd, env=spec.env)


def start(
    state_dir: Path | None = None, cache_dir: Path | None = None, *, timeout: float | None = None
) -> Running:
    """Build etcd if needed, start (or reuse) the secured member in ``<state_dir>/etcd-secure``."""
    return SecureEtcd(state_dir, cache_dir).start(timeout)


def attach(state_dir: Path | None = None) -> Running | None:
    """A handle on an already running member (e.g. ``python -m e2e.infra up etcd-secure``)."""
    return SecureEtcd(state_dir).attach()
