"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from tests.conftest import require_server
from tests.support.sink import RecordingSink

CompletedText = subprocess.CompletedProcess[str]


@pytest.fixture
async def sink() -> AsyncIterator[RecordingSink]:
    """A real HTTP callback receiver on loopback that records what it gets."""
    receiver = await RecordingSink().start()
    yield receiver
    await receiver.stop()


@pytest.fixture
async def client(node: app.Node) -> AsyncIterator[ClockworkClient]:
    """A client of the module's `node` (an api without auth), as tenant `acme`."""
    assert node.api is not None
    settings = ClientSettings(server=f"127.0.0.1:{node.api.port}", tenant="acme")
    async with ClockworkClient(settings) as c:
        yield c


@dataclass(frozen=True)
class KubeControlPlane:
    """The control plane and tools that `python -m e2e.infra up` started and built."""

    kubeconfig: str
    kubectl: str
    helm: str
    version: str
    """e.g. ``1.37.2``, without the ``v``."""

    def run(self, *argv: str, stdin: str | None = None, timeout: float = 90) -> CompletedText:
        """Run ``argv`` (kubectl/helm) against this control plane; never raises on exit codes."""
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=env, timeout=timeout
        )


@pytest.fixture(scope="session")
def kube_control_plane() -> KubeControlPlane:
    """Skips without `CLOCKWORK_KUBECONFIG` (fails under `CLOCKWORK_REQUIRE_INFRA=1`)."""
    return KubeControlPlane(
        kubeconfig=require_server("CLOCKWORK_KUBECONFIG"),
        kubectl=require_server("CLOCKWORK_KUBECTL"),
        helm=require_server("CLOCKWORK_HELM"),
        version=require_server("CLOCKWORK_KUBE_VERSION"),
    )
