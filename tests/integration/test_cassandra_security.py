"""Clockwork against a Cassandra secured as in production (e2e/infra/cassandra_secure.py):
TLS only on the native port, client certificates required, PasswordAuthenticator and
CassandraAuthorizer, and a `clockwork` role that may only create keyspaces (and has
every permission on those it creates).

The module starts its own node in a temporary state dir and destroys it at the end.
Every start-up mistake (a wrong password, an untrusted node certificate, no client
certificate) must end a real `clockwork` process at once with one line naming the
flags to check, not after the 120 s `--cassandra-connect-timeout` an unreachable
cluster gets.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cassandra import Unauthorized

from clockwork_svc import app
from clockwork_svc.abc import SystemClock
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.domain.triggers import OnceTrigger
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.settings import (
    CassandraSettings,
    CassandraTlsSettings,
    ProcessSettings,
    StoreSettings,
)
from clockwork_svc.storage.cassandra import bridge, connecting
from e2e.infra import cql, pki
from e2e.infra.cassandra_secure import CLOCKWORK, Pki, SecureCassandra
from e2e.infra.server import Running
from tests.conftest import require_server
from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving
from tests.support.sink import RecordingSink

pytestmark = pytest.mark.cassandra

# A refused login or certificate is answered in milliseconds; this bounds a whole
# `clockwork` process (Python's start-up and imports included) on a loaded 2-core
# machine. An unreachable cluster would hold it for the connect timeout instead.
PROMPT_S = 10.0


@dataclass(frozen=True)
class Secured:
    running: Running
    pki: Pki
    keyspace: str
    password_file: Path

    @property
    def address(self) -> str:
        return self.running.address

    def tls(self, *, cert: bool = True, ca: Path | None = None) -> CassandraTlsSettings:
        return CassandraTlsSettings(
            ca_file=ca or self.pki.ca,
            cert_file=self.pki.client_cert if cert else None,
            key_file=self.pki.client_key if cert else None,
        )

    def settings(self) -> CassandraSettings:
        return CassandraSettings(
            contact_points=(self.address,),
            keyspace=self.keyspace,
            username=CLOCKWORK.role,
            password=CLOCKWORK.password,
            tls=self.tls(),
            connect_timeout_s=30.0,
        )

    def env(self) -> dict[str, str]:
        """Every setting through the environment, the password from a file."""
        return {
            "CLOCKWORK_CASSANDRA": self.address,
            "CLOCKWORK_KEYSPACE": self.keyspace,
            "CLOCKWORK_CASSANDRA_USER": CLOCKWORK.role,
            "CLOCKWORK_CASSANDRA_PASSWORD_FILE": str(self.password_file),
            "CLOCKWORK_CASSANDRA_TLS_CA": str(self.pki.ca),
            "CLOCKWORK_CASSANDRA_TLS_CERT": str(self.pki.client_cert),
            "CLOCKWORK_CASSANDRA_TLS_KEY": str(self.pki.client_key),
        }

    def flags(self, *, password: str = CLOCKWORK.password, cert: bool = True) -> list[str]:
        """The same as flags (a flag wins over its variable), with `password`."""
        flags = [
            "--cassandra", self.address,
            "--keyspace", self.keyspace,
            "--cassandra-user", CLOCKWORK.role,
            "--cassandra-password", password,
            "--cassandra-tls-ca", str(self.pki.ca),
            "--cassandra-connect-timeout", "120",
        ]  # fmt: skip
        if cert:
            flags += ["--cassandra-tls-cert", str(self.pki.client_cert)]
            flags += ["--cassandra-tls-key", str(self.pki.client_key)]
        return flags


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    state = tmp_path_factory.mktemp("cassandra-secure-state")
    server = SecureCassandra(state)
    if shutil.which("java") is None or not server.lib_dir.is_dir():
        # Fetched by `python -m e2e.infra up` (which publishes CLOCKWORK_CASSANDRA):
        # skips on a laptop without it, fails under CI.
        require_server("CLOCKWORK_CASSANDRA")
    started = time.monotonic()
    running = server.start()
    print(f"secured Cassandra ready in {time.monotonic() - started:.1f}s")
    password_file = state / "cassandra-password"
    password_file.write_text(CLOCKWORK.password + "\n")
    try:
        yield Secured(running, server.pki, "sec_" + uuid.uuid4().hex[:10], password_file)
    finally:
        running.destroy()


@pytest.fixture(scope="module")
def migrated(secured: Secured) -> Secured:
    """`clockwork schema migrate` over TLS, as the `clockwork` role, every setting
    from the environment (the password from a file, as a mounted Secret gives it)."""

    async def migrate() -> tuple[int, str, str]:
        return await run_cli("schema", "migrate", "--shards", "8", env=secured.env(), timeout_s=180)

    code, out, err = asyncio.run(migrate())
    assert code == 0, err
    assert "applied" in out
    return secured


async def test_the_store_opens_over_tls_and_writes_and_reads(migrated: Secured) -> None:
    settings = ProcessSettings(store=StoreSettings(kind="cassandra", cassandra=migrated.settings()))
    store = await app.open_store(settings, SystemClock(), serves_api=True)
    try:
        token_hash = "hash-" + uuid.uuid4().hex
        await store.put_token_owner(token_hash, "tenant-a")
        assert await store.token_owner(token_hash) == "tenant-a"
        assert (await store.layout()).shard_count == 8
    finally:
        await store.close()


async def test_an_api_and_a_worker_process_fire_from_the_secured_store(
    migrated: Secured, sink: RecordingSink, tmp_path: Path
) -> None:
    """A real `clockwork api` and `clockwork worker`, started with the environment
    alone: a create is a write, a get a read, and the worker fires the schedule."""
    address = f"127.0.0.1:{free_port()}"
    private = ["--allow-private-targets", "127.0.0.0/8", "--ops-listen", "127.0.0.1:0"]
    api = ClockworkProcess(
        ["api", "--listen", address, *private], tmp_path / "api.log", migrated.env()
    )
    worker = ClockworkProcess(["worker", *private], tmp_path / "worker.log", migrated.env())
    await api.start()
    await worker.start()
    try:
        await wait_serving(address, timeout_s=60)
        spec = ScheduleSpec(
            OnceTrigger(int(time.time() * 1000) + 2_000),
            HttpTarget(f"{sink.url}/secured"),
            payload=b"{}",
        )
        async with ClockworkClient(ClientSettings(address, tenant="acme")) as client:
            created = await client.create("secured", spec)
            got = await client.get("secured")
        assert got.key == created.schedule.key == "secured"
        assert got.spec == spec
        [delivered] = await sink.wait_for("/secured", 1, timeout_s=60)
        assert delivered.ok
    finally:
        for process in (worker, api):
            await process.kill(signal.SIGTERM)


async def test_the_clockwork_role_may_not_administer_roles(migrated: Secured) -> None:
    """Only what Clockwork needs: its keyspace, not the cluster's logins."""
    cluster, session = await connecting.connect(
        [migrated.address],
        username=CLOCKWORK.role,
        password=CLOCKWORK.password,
        tls=migrated.tls(),
        timeout_s=30,
    )
    try:
        with pytest.raises(Unauthorized):
            await bridge.execute(session, "CREATE ROLE intruder WITH PASSWORD = 'x'", ())
        with pytest.raises(Unauthorized):
            await bridge.fetch(session, "SELECT role FROM system_auth.roles", (), max_rows=10)
    finally:
        await connecting.shutdown(cluster)


async def refused_start(*args: str) -> str:
    """Run `clockwork ARGS`, which must fail promptly; its one-line error."""
    started = time.monotonic()
    code, _, err = await run_cli(*args, timeout_s=60)
    took = time.monotonic() - started
    assert code == 1, err
    assert took < PROMPT_S, f"took {took:.1f}s: {err}"
    error = err.strip().splitlines()[-1]
    assert error.startswith("Error: Cassandra at "), err
    return error


async def test_a_wrong_password_ends_start_up_at_once(secured: Secured) -> None:
    error = await refused_start(
        "api", "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0",
        *secured.flags(password="not-the-password"),
    )  # fmt: skip
    assert "login refused: Provided username clockwork and/or password are incorrect" in error
    assert error.endswith(
        "(check --cassandra-user, and --cassandra-password or --cassandra-password-file)"
    )


async def test_an_untrusted_node_certificate_ends_start_up_at_once(
    secured: Secured, tmp_path: Path
) -> None:
    other = pki.make_pki(tmp_path / "other", "some-other-ca")
    flags = secured.flags()
    flags[flags.index("--cassandra-tls-ca") + 1] = str(other / "ca.crt")
    error = await refused_start("schema", "migrate", *flags)
    assert "the node's certificate is not trusted (unable to get local issuer certificate)" in error
    assert error.endswith("(check --cassandra-tls-ca)")


async def test_no_client_certificate_ends_start_up_at_once(secured: Secured) -> None:
    error = await refused_start("worker", "--ops-listen", "127.0.0.1:0", *secured.flags(cert=False))
    assert "the node requires a client certificate" in error
    assert error.endswith("(check --cassandra-tls-cert and --cassandra-tls-key)")


async def test_a_client_certificate_from_another_ca_ends_start_up_at_once(
    secured: Secured, tmp_path: Path
) -> None:
    other = pki.make_pki(tmp_path / "other", "some-other-ca")
    flags = secured.flags()
    flags[flags.index("--cassandra-tls-cert") + 1] = str(other / "client.crt")
    flags[flags.index("--cassandra-tls-key") + 1] = str(other / "client.key")
    error = await refused_start("schema", "migrate", *flags)
    assert "the node refused the client certificate" in error
    assert error.endswith("(check --cassandra-tls-cert and --cassandra-tls-key)")


async def test_a_key_that_is_not_the_certificates_names_the_flags(secured: Secured) -> None:
    flags = secured.flags()
    flags[flags.index("--cassandra-tls-key") + 1] = str(secured.pki.server_key)
    code, _, err = await run_cli("schema", "migrate", *flags, timeout_s=60)
    assert code == 1
    error = err.strip().splitlines()[-1]
    assert "cannot load the client certificate" in error
    assert error.endswith("(check --cassandra-tls-cert and --cassandra-tls-key)")


async def test_the_driver_without_tls_never_gets_a_session(secured: Secured) -> None:
    with pytest.raises(StoreUnavailable, match="resets plain-text connections"):
        await connecting.connect(
            [secured.address],
            username=CLOCKWORK.role,
            password=CLOCKWORK.password,
            timeout_s=2,
        )


@pytest.mark.parametrize("opcode", [cql.OP_OPTIONS, cql.OP_STARTUP])
def test_a_plain_text_cql_frame_gets_no_cql_answer(secured: Secured, opcode: int) -> None:
    """Nothing reaches the store in plain text: the node answers a plain CQL v4
    OPTIONS or STARTUP frame with no frame at all (it closes the connection)."""
    body = b""
    if opcode == cql.OP_STARTUP:
        body = struct.pack(">H", 1) + cql._string("CQL_VERSION") + cql._string("3.0.0")
    frame = cql.HEADER.pack(cql.VERSION_REQUEST, 0, 0, opcode, len(body)) + body
    host, _, port = secured.address.rpartition(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(3)
        try:
            sock.sendall(frame)
            while chunk := sock.recv(4096):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass
    assert answer[:1] != bytes([cql.VERSION_RESPONSE]), answer[:32]


def test_the_same_frames_over_tls_with_a_login_are_answered(secured: Secured) -> None:
    """The control for the test above: the node does answer CQL, over TLS."""
    host, _, port = secured.address.rpartition(":")
    version = cql.release_version(
        host, int(port), tls=secured.pki.client_context(), login=CLOCKWORK
    )
    assert version.startswith("5.0")
