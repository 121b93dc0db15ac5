"""One tenant's endpoint that takes seconds to answer ties up only that tenant's share
of a worker's delivery slots (`--max-tenant-share`): another tenant's firings, due
meanwhile, go out on time. With the share at 1 (no isolation) the same scenario
starves the other tenant, which shows the test can tell. Against the real api and
worker on the embedded store, delivering to real HTTP receivers on loopback."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from e2e.sink import RecordingSink
from tests.integration.test_dev_node import dev_settings

SLOTS = 4
HOLD_S = 8.0


@pytest.fixture
async def slow_sink() -> AsyncIterator[RecordingSink]:
    receiver = await RecordingSink(delay_s=HOLD_S).start()
    yield receiver
    await receiver.stop()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def spec(url: str, due_ms: int) -> ScheduleSpec:
    return ScheduleSpec(triggers.OnceTrigger(due_ms), HttpTarget(url), b"{}")


@pytest.mark.parametrize(("share", "isolated"), [(0.5, True), (1.0, False)])
async def test_a_slow_tenant_ties_up_only_its_share_of_the_slots(
    tmp_path: Path, sink: RecordingSink, slow_sink: RecordingSink, share: float, isolated: bool
) -> None:
    settings = dev_settings(tmp_path)
    worker = dataclasses.replace(
        settings.worker, max_concurrent_deliveries=SLOTS, max_tenant_share=share
    )
    settings = dataclasses.replace(settings, worker=worker)
    async with app.running(settings, api=True, worker=True) as node:
        assert node.api is not None
        address = f"127.0.0.1:{node.api.port}"
        slow = ClockworkClient(ClientSettings(server=address, tenant="slow"))
        fast = ClockworkClient(ClientSettings(server=address, tenant="fast"))
        async with slow, fast:
            due = now_ms() + 1500
            for i in range(2 * SLOTS):  # enough to fill every slot, held HOLD_S each
                await slow.create(f"s-{i}", spec(slow_sink.url + "/slow", due))
            fast_due = due + 1000  # once the slow tenant's deliveries hold their slots
            for i in range(SLOTS):
                await fast.create(f"f-{i}", spec(sink.url + "/fast", fast_due))
            got = await sink.wait_for("/fast", SLOTS, timeout_s=4 * HOLD_S)
    lag_ms = max(r.received_ms for r in got) - fast_due
    print(f"share {share}: the other tenant's worst lag {lag_ms} ms")
    if isolated:
        # Its firings found free slots: nowhere near the slow endpoint's hold.
        assert lag_ms < HOLD_S * 1000 / 2
    else:
        # Every slot was held by the slow tenant until its endpoint answered.
        assert lag_ms > HOLD_S * 1000 / 2
