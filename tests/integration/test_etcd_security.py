"""Clockwork against an etcd secured as in production (e2e/infra/etcd_secure.py): https
only, client certificates required, authentication on, and a `clockwork` role that
may read and write only Clockwork's keys.

The module starts its own member in a temporary state dir and stops it at the end.
Workers run in this process on one SQLite store (the epochs), as in
test_etcd_coordination.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aetcd
import grpc
import pytest

from clockwork_svc.coordination import etcd_access
from clockwork_svc.coordination.etcd import (
    EtcdLoadReader,
    check_access,
    cluster_status,
    connect,
)
from clockwork_svc.coordination.etcd_access import EtcdAccessError
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.settings import EtcdSecurity, EtcdSettings, EtcdTlsSettings
from clockwork_svc.storage.sqlite import SqliteStore
from e2e.infra import etcd_secure, pki
from e2e.infra.server import Running
from tests.conftest import require_server
from tests.integration.test_etcd_coordination import Member, start_member, wait_until
from tests.support.processes import CLOCKWORK

SHARDS = 8
TTL = 3
# A refused TLS handshake or password is answered in milliseconds; this bounds the
# whole check, connection included, on a loaded 2-core machine.
PROMPT_S = 3.0


@dataclass(frozen=True)
class Secured:
    running: Running
    pki: Path

    @property
    def endpoint(self) -> str:
        return self.running.address

    def tls(self, leaf: str | None = "clockwork", ca: Path | None = None) -> EtcdTlsSettings:
        """TLS trusting the member's CA (or `ca`), with the client certificate `leaf`."""
        cert = None if leaf is None else self.pki / f"{leaf}.crt"
        key = None if leaf is None else self.pki / f"{leaf}.key"
        return EtcdTlsSettings(ca or self.pki / "ca.crt", cert, key)

    def as_certificate(self, leaf: str = "clockwork") -> EtcdSecurity:
        return EtcdSecurity(tls=self.tls(leaf))

    def with_password(self, password: str = etcd_secure.CLOCKWORK_PASSWORD) -> EtcdSecurity:
        # The member requires a client certificate from everyone; `stranger` is no
        # etcd user, so whatever this client may do, it may by its password.
        return EtcdSecurity(
            tls=self.tls("stranger"), username=etcd_secure.CLOCKWORK_USER, password=password
        )

    def settings(self, security: EtcdSecurity, **overrides: object) -> EtcdSettings:
        values: dict[str, object] = {
            "endpoint": self.endpoint,
            "security": security,
            "cluster": "sec-" + uuid.uuid4().hex[:8],
            "lease_ttl_s": TTL,
            "safety_margin_s": 0.75,
            "rebalance_interval_s": 0.5,
            "load_report_interval_s": 0.3,
            "worker_id": "w-" + uuid.uuid4().hex[:6],
        }
        values.update(overrides)
        return EtcdSettings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    server = etcd_secure.SecureEtcd(tmp_path_factory.mktemp("etcd-secure-state"))
    if not server.etcd_bin.exists():
        # Built by `python -m e2e.infra up` (which publishes CLOCKWORK_ETCD): skips on a
        # laptop without it, fails under CI.
        require_server("CLOCKWORK_ETCD")
    running = server.start()
    try:
        yield Secured(running, server.pki_dir)
    finally:
        running.destroy()


@contextlib.asynccontextmanager
async def member(settings: EtcdSettings, tmp_path: Path) -> AsyncIterator[Member]:
    """A worker and its coordinator, as `clockwork worker` wires them."""
    layout = ClusterLayout(SHARDS, 60_000, int(time.time() * 1000))
    store = await SqliteStore.open(tmp_path / f"{settings.cluster}.db", layout)
    running = await start_member(store, settings)
    try:
        yield running
    finally:
        await running.stop()
        await store.close()


async def refused(settings: EtcdSettings) -> str:
    """The start-up check's one line, which must come promptly."""
    started = time.monotonic()
    with pytest.raises(EtcdAccessError) as caught:
        await check_access(settings, write=True)
    assert time.monotonic() - started < PROMPT_S
    message = str(caught.value)
    assert "\n" not in message and settings.endpoint in message
    return message


async def test_a_worker_owns_shards_as_the_user_its_certificate_names(
    secured: Secured, tmp_path: Path
) -> None:
    settings = secured.settings(secured.as_certificate())
    await check_access(settings, write=True)
    async with member(settings, tmp_path) as m:
        await wait_until(lambda: len(m.worker.owned_shards) == SHARDS, 15)
        view = await cluster_status(settings.endpoint, settings.cluster, settings.security)
        assert set(view.workers) == {settings.worker_id} and len(view.owners) == SHARDS


async def test_a_worker_owns_shards_as_the_user_of_its_password(
    secured: Secured, tmp_path: Path
) -> None:
    settings = secured.settings(secured.with_password())
    await check_access(settings, write=True)
    async with member(settings, tmp_path) as m:
        await wait_until(lambda: len(m.worker.owned_shards) == SHARDS, 15)
        reader = EtcdLoadReader(settings, SHARDS)
        try:
            await wait_until_async(lambda: _reported(reader, settings.worker_id), 10)
        finally:
            await reader.close()


async def _reported(reader: EtcdLoadReader, worker_id: str) -> bool:
    load = await reader.cluster_load()
    return [w.worker_id for w in load.workers] == [worker_id]


async def wait_until_async(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"condition not met within {timeout_s}s"
        await asyncio.sleep(0.2)


async def test_a_wrong_password_is_refused_at_once_naming_the_flags(secured: Secured) -> None:
    message = await refused(secured.settings(secured.with_password("not-the-password")))
    assert "wrong user name or password" in message
    assert "--etcd-user" in message and "--etcd-password" in message


async def test_an_untrusted_server_certificate_is_refused_naming_the_ca_flag(
    secured: Secured, tmp_path: Path
) -> None:
    other = pki.make_pki(tmp_path / "other", "another-ca", ("clockwork",))
    message = await refused(secured.settings(EtcdSecurity(tls=secured.tls(ca=other / "ca.crt"))))
    assert "did not sign" in message and "--etcd-tls-ca" in message


async def test_a_missing_client_certificate_is_refused_naming_the_cert_flags(
    secured: Secured,
) -> None:
    message = await refused(secured.settings(EtcdSecurity(tls=secured.tls(leaf=None))))
    assert "requires a client certificate" in message
    assert "--etcd-tls-cert" in message and "--etcd-tls-key" in message


async def test_a_client_certificate_of_another_ca_is_refused(
    secured: Secured, tmp_path: Path
) -> None:
    other = pki.make_pki(tmp_path / "other", "another-ca", ("clockwork",))
    tls = EtcdTlsSettings(secured.pki / "ca.crt", other / "clockwork.crt", other / "clockwork.key")
    message = await refused(secured.settings(EtcdSecurity(tls=tls)))
    assert "refuses the client certificate in --etcd-tls-cert" in message


async def test_a_certificate_user_without_the_role_is_refused_naming_the_prefixes(
    secured: Secured,
) -> None:
    settings = secured.settings(secured.as_certificate("stranger"))
    message = await refused(settings)
    assert "CN of --etcd-tls-cert" in message
    assert settings.prefix in message and settings.load_prefix in message


async def test_a_read_only_user_is_refused_at_start_up_without_a_write(
    secured: Secured,
) -> None:
    """The check writes nothing: etcd checks the permission of every request in a
    transaction, also of one whose comparison never holds."""
    server = secured.running.server
    assert isinstance(server, etcd_secure.SecureEtcd)
    port = secured.running.port
    with contextlib.suppress(Exception):  # a second run in the same state dir
        for step in (
            ("role", "add", "reader"),
            ("role", "grant-permission", "reader", "read", "/clockwork", "--prefix"),
            ("user", "add", "reader", "--new-user-password=reader-password"),
            ("user", "grant-role", "reader", "reader"),
        ):
            await asyncio.to_thread(server.etcdctl, port, *step)
    reader = EtcdSecurity(
        tls=secured.tls("stranger"), username="reader", password="reader-password"
    )
    settings = secured.settings(reader)
    await check_access(settings, write=False)  # an api needs only to read
    message = await refused(settings)
    assert "denies user 'reader' (--etcd-user) access to Clockwork's keys" in message
    # Nor did the clockwork user's check (it may write) leave anything behind.
    await check_access(
        secured.settings(secured.as_certificate(), cluster=settings.cluster), write=True
    )
    client = await connect(secured.endpoint, security=secured.as_certificate())
    try:
        for prefix in (settings.prefix, settings.load_prefix):
            assert (await client.get_prefix(prefix.encode())).count == 0
    finally:
        await client.close()


async def test_the_clockwork_role_cannot_write_outside_its_prefix(secured: Secured) -> None:
    client = await connect(secured.endpoint, security=secured.as_certificate())
    try:
        await client.put(b"/clockwork/sec-probe/inside", b"1")
        for key in (b"/outside", b"/registry/pods/x", b"/clockwor"):
            with pytest.raises(aetcd.ClientError) as caught:
                await client.put(key, b"1")
            code, details = etcd_access.status_of(caught.value)
            assert code == grpc.StatusCode.PERMISSION_DENIED, (key, details)
            with pytest.raises(aetcd.ClientError):
                await client.get(key)
    finally:
        await client.close()


async def test_nothing_answers_in_plain_text(secured: Secured) -> None:
    # An etcd client without TLS: refused with a hint, not an etcd answer.
    settings = secured.settings(EtcdSecurity())
    message = await refused(settings)
    assert "--etcd-tls-ca" in message
    # Plain HTTP (etcd's gateway and /version, /health would answer it on an http URL).
    reply = await asyncio.to_thread(_plain_http, secured.running.host, secured.running.port)
    assert b"etcdserver" not in reply and b"health" not in reply
    assert reply.startswith(b"HTTP/1.0 400") or reply == b"", reply[:200]


def _plain_http(host: str, port: int) -> bytes:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"GET /version HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        chunks = []
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    return b"".join(chunks)


async def test_the_same_member_answers_over_tls(secured: Secured) -> None:
    """The control for the test above: the port does serve /version over TLS."""
    context = ssl.create_default_context(cafile=str(secured.pki / "ca.crt"))
    context.load_cert_chain(secured.pki / "clockwork.crt", secured.pki / "clockwork.key")

    def fetch() -> bytes:
        import urllib.request

        url = f"https://{secured.endpoint}/version"
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            body: bytes = response.read()
            return body

    assert b"etcdserver" in await asyncio.to_thread(fetch)


async def test_a_member_list_is_checked_by_the_first_members_address(secured: Secured) -> None:
    """gRPC's authority for a list of addresses is the whole list, which no certificate
    names; the client checks the member it tries first by that member's address
    (endpoints.tls_name). 127.0.0.2 is listed but refuses connections here."""
    port = secured.running.port
    members = f"127.0.0.1:{port},127.0.0.2:{port}"
    view = await cluster_status(members, "sec-list", secured.as_certificate())
    assert view.owners == {}


@pytest.mark.slow
async def test_after_an_etcd_restart_the_worker_authenticates_again_and_owns_its_shards(
    secured: Secured, tmp_path: Path
) -> None:
    """etcd keeps password tokens in memory only: after a restart every token is
    invalid, and the worker must authenticate again (a new session, a new client)."""
    settings = secured.settings(secured.with_password())
    reader = EtcdLoadReader(settings, SHARDS)
    async with member(settings, tmp_path) as m:
        try:
            await wait_until(lambda: len(m.worker.owned_shards) == SHARDS, 15)
            await wait_until_async(lambda: _reported(reader, settings.worker_id), 10)
            before = dict(m.worker.owned_shards)
            stopped = time.monotonic()
            await asyncio.to_thread(secured.running.restart)
            restarted = time.monotonic()
            # The shards come back under a new lease, so under newer epochs.
            await wait_until(
                lambda: (
                    len(m.worker.owned_shards) == SHARDS
                    and all(m.worker.owned_shards[s] > e for s, e in before.items())
                    and m.coordinator.may_dispatch()
                ),
                TTL + 20,
            )
            print(
                f"etcd down and starting for {restarted - stopped:.1f}s; every shard owned "
                f"again {time.monotonic() - restarted:.1f}s after it was ready"
            )
            # The load reader's token is gone too: it authenticates again on its own.
            assert await _reported(reader, settings.worker_id)
        finally:
            await reader.close()


def test_the_worker_command_exits_with_one_line_naming_the_flag(secured: Secured) -> None:
    """The process, not only the check: a wrong password ends `clockwork worker` before
    it opens its store, with one line and exit status 1."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CLOCKWORK_", "GRPC_"))
    }
    env.update(
        CLOCKWORK_ETCD=secured.endpoint,
        CLOCKWORK_ETCD_TLS_CA=str(secured.pki / "ca.crt"),
        CLOCKWORK_ETCD_TLS_CERT=str(secured.pki / "stranger.crt"),
        CLOCKWORK_ETCD_TLS_KEY=str(secured.pki / "stranger.key"),
        CLOCKWORK_ETCD_USER=etcd_secure.CLOCKWORK_USER,
        CLOCKWORK_ETCD_PASSWORD="not-the-password",
        CLOCKWORK_OPS_LISTEN="127.0.0.1:0",
        # Never reached: the etcd check comes first.
        CLOCKWORK_CASSANDRA="127.0.0.1:1",
        CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT="0",
    )
    started = time.monotonic()
    done = subprocess.run(
        [*CLOCKWORK, "worker"], env=env, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: etcd at {secured.endpoint} refuses user 'clockwork'"), last
    assert "--etcd-password" in last
    assert "Traceback" not in done.stderr
    assert took < 15, took  # the interpreter's start-up and imports, then milliseconds
