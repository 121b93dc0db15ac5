"""TLS and mutual TLS on the gRPC API, with certificates made by openssl."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.errors import Unavailable
from clockwork_svc.server.grpc_server import TlsSettings
from e2e.infra.pki import make_pki
from tests.integration.test_dev_node import dev_settings
from tests.support.processes import run_cli


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("certs"), "clockwork-test-ca")


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second, unrelated CA with its own client certificate."""
    return make_pki(tmp_path_factory.mktemp("other-certs"), "some-other-ca")


async def start(tmp_path: Path, tls: TlsSettings) -> AsyncIterator[app.Node]:
    base = dev_settings(tmp_path)
    settings = dataclasses.replace(base, api=dataclasses.replace(base.api, tls=tls))
    async with app.running(settings, api=True, worker=False) as node:
        yield node


@pytest.fixture
async def tls_node(tmp_path: Path, certs: Path) -> AsyncIterator[app.Node]:
    async for node in start(tmp_path, TlsSettings(certs / "server.crt", certs / "server.key")):
        yield node


@pytest.fixture
async def mtls_node(tmp_path: Path, certs: Path) -> AsyncIterator[app.Node]:
    tls = TlsSettings(certs / "server.crt", certs / "server.key", certs / "ca.crt")
    async for node in start(tmp_path, tls):
        yield node


def address(node: app.Node) -> str:
    assert node.api is not None
    return f"127.0.0.1:{node.api.port}"


async def test_tls_server_serves_trusting_clients_only(tls_node: app.Node, certs: Path) -> None:
    trusted = ClientSettings(address(tls_node), tenant="t", ca_file=certs / "ca.crt", timeout_s=5)
    async with ClockworkClient(trusted) as c:
        assert (await c.list()).items == ()
    async with ClockworkClient(ClientSettings(address(tls_node), tenant="t", timeout_s=3)) as c:
        with pytest.raises(Unavailable) as err:
            await c.list()  # plaintext against TLS: no connection is ever established
        assert err.value.status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    code, _, err_text = await run_cli(
        "schedule",
        "list",
        "--server",
        address(tls_node),
        "--tls-ca",
        str(certs / "ca.crt"),
        "--json",
    )
    assert code == 0, err_text


async def test_mutual_tls_rejects_a_client_without_a_certificate(
    mtls_node: app.Node, certs: Path
) -> None:
    no_cert = ClientSettings(address(mtls_node), tenant="t", ca_file=certs / "ca.crt", timeout_s=3)
    async with ClockworkClient(no_cert) as c:
        with pytest.raises(Unavailable) as err:
            await c.list()
        # The handshake is refused; the channel keeps reconnecting until the deadline.
        assert err.value.status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    with_cert = dataclasses.replace(
        no_cert, cert_file=certs / "client.crt", key_file=certs / "client.key"
    )
    async with ClockworkClient(with_cert) as c:
        assert (await c.list()).items == ()


async def test_mutual_tls_rejects_a_client_certificate_from_another_ca(
    mtls_node: app.Node, certs: Path, other_certs: Path
) -> None:
    """The client trusts the server, and presents a well-formed certificate, but one the
    server's client CA did not sign: the handshake fails (see also the no-certificate
    case above)."""
    foreign = ClientSettings(
        address(mtls_node),
        tenant="t",
        ca_file=certs / "ca.crt",
        cert_file=other_certs / "client.crt",
        key_file=other_certs / "client.key",
        timeout_s=3,
    )
    async with ClockworkClient(foreign) as c:
        with pytest.raises(Unavailable) as err:
            await c.list()
        assert err.value.status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    # The same client with the right CA's certificate gets in.
    own = dataclasses.replace(
        foreign, cert_file=certs / "client.crt", key_file=certs / "client.key"
    )
    async with ClockworkClient(own) as c:
        assert (await c.list()).items == ()
