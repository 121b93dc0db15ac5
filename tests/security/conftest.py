"""A real api + worker with auth on (admin token, tenants created through the API)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.errors import ClockworkError
from clockwork_svc.server.auth import AuthSettings
from tests.integration.test_dev_node import dev_settings
from tests.support.sink import RecordingSink

ADMIN = "security-admin-token-0123456789"


@pytest.fixture
async def sink() -> AsyncIterator[RecordingSink]:
    receiver = await RecordingSink().start()
    yield receiver
    await receiver.stop()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[app.Node]:
    base = dev_settings(tmp_path)
    settings = dataclasses.replace(
        base,
        api=dataclasses.replace(
            base.api, auth=AuthSettings.from_pairs("", admin_token=ADMIN), token_cache_s=0.2
        ),
        worker=dataclasses.replace(base.worker, tenant_cache_s=0.2),
    )
    async with app.running(settings, api=True, worker=True) as running:
        yield running


def client_for(node: app.Node, token: str | None, tenant: str | None = None) -> ClockworkClient:
    assert node.api is not None
    return ClockworkClient(
        ClientSettings(f"127.0.0.1:{node.api.port}", tenant=tenant, token=token, timeout_s=10)
    )


async def expect_error(call: object, kind: type[ClockworkError]) -> None:
    with pytest.raises(ClockworkError) as err:
        await call  # type: ignore[misc]
    assert type(err.value) is kind, (err.value.status, str(err.value))
