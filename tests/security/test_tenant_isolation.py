"""Tenant isolation through the real API: tenant B cannot see or change anything of
tenant A's (schedules, executions, dead letters), whatever it names."""

from __future__ import annotations

import asyncio
import time

from clockwork_svc import app
from clockwork_svc.api.v1.model import DeadLetterInfo, DeadLetterRange
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, RetryKind, RetryPolicy, ScheduleSpec
from clockwork_svc.errors import NotFound, Unauthenticated
from tests.security.conftest import ADMIN, client_for, expect_error
from tests.support.sink import RecordingSink

DEFAULT_RETRY = RetryPolicy()


def once(url: str, in_ms: int, retry: RetryPolicy = DEFAULT_RETRY) -> ScheduleSpec:
    at = time.time_ns() // 1_000_000 + in_ms
    return ScheduleSpec(triggers.OnceTrigger(at), HttpTarget(url), payload=b"{}", retry=retry)


async def wait_for_dead_letter(client: ClockworkClient, key: str) -> DeadLetterInfo:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        letters = (await client.dead_letters(DeadLetterRange(key=key))).items
        if letters:
            return letters[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no dead letter for {key}")


async def test_tenants_cannot_touch_each_others_schedules_or_dead_letters(
    node: app.Node, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 500 if path == "/fails" else 200
    async with client_for(node, ADMIN) as admin:
        a = await admin.create_tenant("tenant-a")
        b = await admin.create_tenant("tenant-b")
    async with client_for(node, a.token) as ca, client_for(node, b.token) as cb:
        await ca.create("secret-job", once(sink.url + "/a", 60_000))
        await ca.create("paused-job", once(sink.url + "/a", 60_000))
        await ca.pause("paused-job")
        await ca.create("doomed", once(sink.url + "/fails", 0, RetryPolicy(RetryKind.NONE)))
        letter = await wait_for_dead_letter(ca, "doomed")
        before = {k: await ca.get(k) for k in ("secret-job", "paused-job", "doomed")}

        for call in (
            cb.get("secret-job"),
            cb.cancel("secret-job"),
            cb.pause("secret-job"),
            cb.resume("paused-job"),
            cb.update("secret-job", once(sink.url + "/b", 60_000)),
            cb.executions("secret-job"),
            cb.executions("doomed"),
        ):
            await expect_error(call, NotFound)
        assert [s.key for s in (await cb.list()).items] == []
        assert (await cb.dead_letters()).items == ()
        assert (await cb.dead_letters(DeadLetterRange(key="doomed"))).items == ()
        # Redriving A's letter by id, by A's key, or everything: nothing of A's moves.
        by_id = await cb.redrive(firing_ids=[letter.firing_id])
        by_key = await cb.redrive(DeadLetterRange(key="doomed"), again=True)
        everything = await cb.redrive(again=True)
        for result in (by_id, by_key, everything):
            assert result.redriven == 0, result
        # B creating the same key makes B's own schedule, not a change to A's.
        mine = await cb.create("secret-job", once(sink.url + "/b", 120_000))
        assert mine.created and mine.schedule.tenant == "tenant-b"

        await asyncio.sleep(0.5)
        after = {k: await ca.get(k) for k in before}
        assert after == before
        [still] = (await ca.dead_letters(DeadLetterRange(key="doomed"))).items
        assert still.redriven_ms is None
        assert len(sink.at("/fails")) == 1  # never delivered again
        assert sink.at("/b") == []
    # A token cannot be used to act for another tenant.
    async with client_for(node, b.token, tenant="tenant-a") as spoof:
        await expect_error(spoof.list(), Unauthenticated)
        await expect_error(spoof.get("secret-job"), Unauthenticated)
