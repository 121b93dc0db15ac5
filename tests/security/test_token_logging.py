"""Credentials never reach the logs: every record emitted (at DEBUG, all loggers)
while tokens are used, refused, issued and revoked is searched for them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from clockwork_svc import app
from clockwork_svc.errors import PermissionDenied, Unauthenticated
from tests.security.conftest import ADMIN, client_for, expect_error


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        parts.append(repr(record.args))
        parts.append(repr(record.__dict__))
    return "\n".join(parts)


async def test_tokens_never_appear_in_logs(
    node: app.Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-token-must-not-be-logged-0123456789"
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("logged")
        issued = await admin.issue_token("logged")
        rotated = await admin.rotate_signing_secret("logged")
    async with client_for(node, created.token) as tenant:
        assert (await tenant.list()).items == ()  # success
        await expect_error(tenant.create_tenant("x"), PermissionDenied)
    async with client_for(node, wrong) as bad:
        await expect_error(bad.list(), Unauthenticated)
    async with client_for(node, issued.token, tenant="someone-else") as spoof:
        await expect_error(spoof.list(), Unauthenticated)
    async with client_for(node, ADMIN) as admin:
        await admin.revoke_tokens("logged")
    await asyncio.sleep(0.5)  # past the token cache
    async with client_for(node, created.token) as revoked:
        await expect_error(revoked.list(), Unauthenticated)
    text = logged_text(caplog)
    assert caplog.records, "nothing was logged: the check would be vacuous"
    secrets = {
        "admin": ADMIN,
        "tenant": created.token,
        "issued": issued.token,
        "wrong": wrong,
        "signing secret": created.signing_secret,
        "rotated secret": rotated.signing_secret,
    }
    for name, secret in secrets.items():
        assert secret not in text, f"the {name} token appears in the logs"
        # Not even its body without the prefix (cwt_..., whsec_...).
        assert secret.split("_", 1)[-1] not in text, f"the {name} token appears in the logs"
