"""Tenant administration and signed deliveries, through the real gRPC API and a real
HTTP receiver; signatures checked by an independent verifier (the standardwebhooks
package). Authentication on every RPC and tenant isolation: tests/security/."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Outcome
from clockwork_svc.domain.spec import HttpTarget, RetryKind, RetryPolicy, ScheduleSpec
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.errors import (
    AlreadyExists,
    ClockworkError,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
)
from clockwork_svc.server.auth import AuthSettings
from tests.integration.test_dev_node import dev_settings
from tests.support.sink import Received, RecordingSink

ADMIN = "admin-token-0123456789abcdef"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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


def once(url: str, in_ms: int = 0) -> ScheduleSpec:
    return ScheduleSpec(
        triggers.OnceTrigger(now_ms() + in_ms), HttpTarget(url), payload=b'{"hi": 1}'
    )


def once_at(url: str, at_ms: int) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(at_ms), HttpTarget(url), payload=b"{}")


def verify(secret: str, got: Received) -> None:
    Webhook(secret).verify(got.body, got.headers, json_parse=False)


async def expect_error(call: object, kind: type[ClockworkError]) -> None:
    with pytest.raises(ClockworkError) as err:
        await call  # type: ignore[misc]
    assert type(err.value) is kind, (err.value.status, str(err.value))


async def test_signed_delivery_verifies_and_survives_rotation(
    node: app.Node, sink: RecordingSink
) -> None:
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("acme")
        await expect_error(admin.create_tenant("acme"), AlreadyExists)
    first_secret = created.signing_secret
    assert first_secret.startswith("whsec_") and created.token.startswith("cwt_")
    async with client_for(node, created.token) as acme:
        await acme.create("signed", once(sink.url + "/signed"))
        [got] = await sink.wait_for("/signed", 1, timeout_s=10)
        verify(first_secret, got)
        async with client_for(node, ADMIN) as admin:
            rotated = await admin.rotate_signing_secret("acme")
        await asyncio.sleep(0.5)  # past the worker's secret cache
        await acme.create("rotated", once(sink.url + "/rotated"))
        [got] = await sink.wait_for("/rotated", 1, timeout_s=10)
        assert len(got.headers["webhook-signature"].split(" ")) == 2
        verify(first_secret, got)
        verify(rotated.signing_secret, got)
        async with client_for(node, ADMIN) as admin:
            retired = await admin.rotate_signing_secret("acme", retire_previous=True)
        assert retired.tenant.signing_secret_count == 1
        await asyncio.sleep(0.5)
        await acme.create("retired", once(sink.url + "/retired"))
        [got] = await sink.wait_for("/retired", 1, timeout_s=10)
        verify(retired.signing_secret, got)
        with pytest.raises(Exception, match="signature"):
            verify(first_secret, got)


async def test_tenant_administration_needs_the_admin_token(node: app.Node) -> None:
    async with client_for(node, ADMIN) as admin:
        t = await admin.create_tenant("plain")
        await expect_error(admin.list(), InvalidArgument)  # names no tenant
    async with client_for(node, t.token) as tenant_client:
        await expect_error(tenant_client.create_tenant("evil"), PermissionDenied)
        await expect_error(tenant_client.issue_token("plain"), PermissionDenied)
    async with client_for(node, ADMIN, tenant="plain") as acting:
        assert (await acting.list()).items == ()


async def test_issued_tokens_work_and_revocation_takes_effect(node: app.Node) -> None:
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("revokee")
        second = await admin.issue_token("revokee")
        assert second.tenant.token_count == 2
        listed = [t.name for t in (await admin.list_tenants()).items]
        assert "revokee" in listed
    async with client_for(node, second.token) as c:
        assert (await c.list()).items == ()
    async with client_for(node, ADMIN) as admin:
        revoked = await admin.revoke_tokens("revokee")
        assert revoked.token_count == 0
    await asyncio.sleep(0.5)  # past the API's token cache
    for token in (created.token, second.token):
        async with client_for(node, token) as c:
            await expect_error(c.list(), Unauthenticated)


async def test_tenant_rate_limit_spaces_deliveries(node: app.Node, sink: RecordingSink) -> None:
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("limited")
        limited = await admin.set_tenant_limits("limited", TenantLimits(rate_per_s=4, burst=1))
        assert limited.limits.rate_per_s == 4
    await asyncio.sleep(0.5)  # past the worker's tenant cache
    async with client_for(node, created.token) as c:
        due = now_ms() + 300
        await c.create_many([(f"r{i}", once_at(sink.url + "/rate", due)) for i in range(8)])
        got = await sink.wait_for("/rate", 8, timeout_s=15)
    times = sorted(r.received_ms for r in got)
    # 8 deliveries at 4/s with a burst of 1 take about 1.75 s, not ~0.
    assert times[-1] - times[0] >= 1500, times


async def test_tenant_concurrency_limit_is_never_exceeded(
    node: app.Node, sink: RecordingSink
) -> None:
    sink.delay_s = 0.3
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("serial")
        await admin.set_tenant_limits("serial", TenantLimits(max_concurrency=1))
    await asyncio.sleep(0.5)
    async with client_for(node, created.token) as c:
        due = now_ms() + 300
        await c.create_many([(f"c{i}", once_at(sink.url + "/conc", due)) for i in range(4)])
        got = await sink.wait_for("/conc", 4, timeout_s=15)
    starts = sorted(r.received_ms for r in got)
    assert all(b - a >= 280 for a, b in itertools.pairwise(starts)), starts


async def test_paused_tenant_holds_firings_past_relevancy_and_drains_on_resume(
    node: app.Node, sink: RecordingSink
) -> None:
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("sidelined")
        paused = await admin.pause_tenant("sidelined")
        assert paused.paused
    await asyncio.sleep(0.5)
    async with client_for(node, created.token) as c:
        short = dataclasses.replace(once_at(sink.url + "/held", now_ms()), relevancy_window_ms=1000)
        await c.create_many([(f"h{i}", short) for i in range(3)])
        await asyncio.sleep(2.5)  # well past the 1 s relevancy window
        assert sink.at("/held") == []
        async with client_for(node, ADMIN) as admin:
            resumed = await admin.resume_tenant("sidelined")
            assert not resumed.paused
        got = await sink.wait_for("/held", 3, timeout_s=10)
        assert len(got) == 3
        outcomes = {e.outcome for e in (await c.executions("h0")).items}
        assert outcomes == {Outcome.SUCCEEDED}


async def test_tenant_defaults_apply_to_schedules_that_leave_policies_unset(
    node: app.Node, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 500
    async with client_for(node, ADMIN) as admin:
        created = await admin.create_tenant("defaulted")
        retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=100)
        updated = await admin.set_tenant_defaults("defaulted", TenantDefaults(retry=retry))
        assert updated.defaults.retry == retry
        bad = TenantDefaults(retry=RetryPolicy(max_attempts=1000))
        await expect_error(admin.set_tenant_defaults("defaulted", bad), InvalidArgument)
    await asyncio.sleep(0.5)  # past the worker's tenant cache
    async with client_for(node, created.token) as c:
        await c.create("uses-default", once(sink.url + "/def"))
        own = dataclasses.replace(once(sink.url + "/own"), retry=RetryPolicy(RetryKind.NONE))
        await c.create("own-policy", own)
        await sink.wait_for("/def", 3, timeout_s=10)
        await asyncio.sleep(0.8)
        assert len(sink.at("/def")) == 3  # the tenant's default: 3 attempts
        assert len(sink.at("/own")) == 1  # the schedule's own policy wins
