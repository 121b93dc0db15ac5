"""The whole firing path in one process (api + worker on the embedded store), through
the real gRPC API, delivering to a real HTTP receiver on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from clockwork_svc import app
from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Created, Outcome, ScheduleState
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, RetryKind, RetryPolicy, ScheduleSpec
from clockwork_svc.errors import AlreadyExists, InvalidArgument, NotFound
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.settings import (
    ApiSettings,
    LayoutSettings,
    OpsSettings,
    ProcessSettings,
    StoreSettings,
)
from clockwork_svc.worker.shard_scanner import ScanSettings
from clockwork_svc.worker.worker import WorkerSettings
from tests.support.sink import RESET, RecordingSink


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def dev_settings(data_dir: Path) -> ProcessSettings:
    return ProcessSettings(
        store=StoreSettings(kind="sqlite", sqlite_path=data_dir / "clockwork.db"),
        layout=LayoutSettings(shard_count=8),
        api=ApiSettings(listen="127.0.0.1:0", auth=AuthSettings(enabled=False)),
        ops=OpsSettings(port=0),
        targets=AddressPolicy(allow_loopback=True),
        worker=WorkerSettings(scan=ScanSettings(poll_interval_ms=100, sweep_interval_ms=300)),
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[app.Node]:
    async with app.running(dev_settings(tmp_path), api=True, worker=True) as running:
        yield running


def spec(url: str, trigger: triggers.Trigger, **changes: object) -> ScheduleSpec:
    base = ScheduleSpec(trigger=trigger, target=HttpTarget(url), payload=b'{"hello":"world"}')
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_one_shot_fires_on_time_with_payload_and_headers(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    due = now_ms() + 1500
    created = await client.create("once", spec(sink.url + "/once", triggers.OnceTrigger(due)))
    assert created.created
    [got] = await sink.wait_for("/once", 1, timeout_s=10)
    assert got.body == b'{"hello":"world"}'
    assert got.headers["Content-Type"] == "application/json"
    assert got.delivery_id.startswith("msg_")
    assert 0 <= got.received_ms - due < 1000
    await asyncio.sleep(0.3)
    schedule = await client.get("once")
    assert schedule.state is ScheduleState.COMPLETED
    assert schedule.last_outcome is Outcome.SUCCEEDED
    executions = await client.executions("once")
    assert [e.outcome for e in executions.items] == [Outcome.SUCCEEDED]
    assert executions.items[0].schedule_key == "once"
    assert executions.items[0].tenant == "acme"


async def test_ops_endpoint_serves_metrics_and_health(
    node: app.Node, client: ClockworkClient, sink: RecordingSink
) -> None:
    import aiohttp

    await client.create("m", spec(sink.url + "/m", triggers.OnceTrigger(now_ms())))
    await sink.wait_for("/m", 1, timeout_s=5)
    await asyncio.sleep(0.3)
    assert node.ops is not None
    base = f"http://127.0.0.1:{node.ops.port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/healthz") as health:
            assert health.status == 200
        async with http.get(base + "/readyz") as ready:
            assert ready.status == 200
        async with http.get(base + "/metrics") as metrics:
            text = await metrics.text()
    assert 'clockwork_firings_total{outcome="succeeded",tenant="acme"} 1.0' in text
    assert "clockwork_shards_total 8.0" in text
    assert "clockwork_schedules_created_total 1.0" in text
    assert "clockwork_create_batch_creates_count 1.0" in text  # the one create, alone
    assert "clockwork_fire_lag_seconds_count 1.0" in text
    assert "clockwork_shards_owned 8.0" in text


async def test_interval_fires_count_times_then_completes(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("tick", spec(sink.url + "/tick", triggers.IntervalTrigger(1000, count=3)))
    got = await sink.wait_for("/tick", 3, timeout_s=10)
    gaps = [b.received_ms - a.received_ms for a, b in itertools.pairwise(got)]
    assert all(800 <= gap <= 1300 for gap in gaps), gaps
    assert len({r.delivery_id for r in got}) == 3
    await asyncio.sleep(1.5)
    assert len(sink.at("/tick")) == 3
    assert (await client.get("tick")).state is ScheduleState.COMPLETED


async def test_failed_delivery_is_retried_with_the_same_delivery_id(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 503 if n < 3 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=5, initial_delay_ms=200)
    await client.create(
        "flaky", spec(sink.url + "/flaky", triggers.OnceTrigger(now_ms()), retry=retry)
    )
    got = await sink.wait_for("/flaky", 3, timeout_s=10)
    assert len({r.delivery_id for r in got}) == 1
    await asyncio.sleep(0.3)
    outcomes = [e.outcome for e in (await client.executions("flaky")).items]
    assert outcomes == [Outcome.SUCCEEDED, Outcome.RETRYING, Outcome.RETRYING]


async def test_attempts_exhausted_ends_failed(client: ClockworkClient, sink: RecordingSink) -> None:
    sink.responder = lambda path, n: 500
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=100)
    await client.create(
        "down", spec(sink.url + "/down", triggers.OnceTrigger(now_ms()), retry=retry)
    )
    await sink.wait_for("/down", 2, timeout_s=10)
    await asyncio.sleep(0.5)
    assert len(sink.at("/down")) == 2
    executions = (await client.executions("down")).items
    assert [e.outcome for e in executions] == [Outcome.FAILED, Outcome.RETRYING]
    assert executions[0].status_code == 500


async def test_permanent_client_error_is_not_retried(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 404
    await client.create("gone", spec(sink.url + "/gone", triggers.OnceTrigger(now_ms())))
    await sink.wait_for("/gone", 1, timeout_s=10)
    await asyncio.sleep(0.5)
    assert len(sink.at("/gone")) == 1


async def test_410_gone_cancels_the_schedule(client: ClockworkClient, sink: RecordingSink) -> None:
    sink.responder = lambda path, n: 410
    await client.create("gone410", spec(sink.url + "/g", triggers.IntervalTrigger(1000)))
    await sink.wait_for("/g", 1, timeout_s=5)
    await asyncio.sleep(2.5)
    assert len(sink.at("/g")) == 1
    schedule = await client.get("gone410")
    assert schedule.state is ScheduleState.CANCELLED
    [execution] = (await client.executions("gone410")).items
    assert execution.outcome is Outcome.FAILED and execution.status_code == 410


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/",
        "http://192.168.0.1:8080/",
        "http://[fd00::1]/",
        "http://0.0.0.0/",
    ],
)
async def test_literal_private_targets_are_refused_at_create(
    client: ClockworkClient, url: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await client.create("ssrf", spec(url, triggers.OnceTrigger(now_ms() + 60_000)))
    assert err.value.field == "spec.http.url"
    assert str(err.value).startswith("spec.http.url:")


async def test_cancel_and_pause_stop_delivery_and_resume_restarts(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("c", spec(sink.url + "/c", triggers.OnceTrigger(now_ms() + 1000)))
    cancelled = await client.cancel("c")
    assert cancelled.state is ScheduleState.CANCELLED
    await client.create("p", spec(sink.url + "/p", triggers.IntervalTrigger(1000)))
    await sink.wait_for("/p", 1, timeout_s=5)
    paused = await client.pause("p")
    assert paused.state is ScheduleState.PAUSED
    count = len(sink.at("/p"))
    await asyncio.sleep(2.5)
    assert len(sink.at("/p")) <= count + 1  # at most one delivery already in flight
    assert sink.at("/c") == []
    resumed = await client.resume("p")
    assert resumed.state is ScheduleState.ACTIVE
    await sink.wait_for("/p", len(sink.at("/p")) + 1, timeout_s=5)


async def test_create_is_idempotent_and_conflicts_on_a_different_spec(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    s = spec(sink.url + "/idem", triggers.OnceTrigger(now_ms() + 500))
    first = await client.create("idem", s)
    again = await client.create("idem", s)
    assert first.created and not again.created
    assert again.schedule.id == first.schedule.id
    with pytest.raises(AlreadyExists):
        await client.create("idem", dataclasses.replace(s, payload=b"other"))
    await sink.wait_for("/idem", 1, timeout_s=5)
    await asyncio.sleep(0.5)
    assert len(sink.at("/idem")) == 1


async def test_update_replaces_the_pending_occurrence(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("u", spec(sink.url + "/old", triggers.OnceTrigger(now_ms() + 1500)))
    updated = await client.update(
        "u", spec(sink.url + "/new", triggers.OnceTrigger(now_ms() + 300))
    )
    assert updated.version == 2
    await sink.wait_for("/new", 1, timeout_s=5)
    await asyncio.sleep(1.8)
    assert sink.at("/old") == []


async def test_tenants_are_isolated(
    node: app.Node, client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("mine", spec(sink.url + "/x", triggers.OnceTrigger(now_ms() + 60_000)))
    assert node.api is not None
    other = ClockworkClient(ClientSettings(server=f"127.0.0.1:{node.api.port}", tenant="other"))
    async with other:
        with pytest.raises(NotFound) as err:
            await other.get("mine")
        assert err.value.status is grpc.StatusCode.NOT_FOUND
        assert isinstance(err.value.__cause__, grpc.aio.AioRpcError)
        assert [s.key for s in (await other.list()).items] == []


async def test_batch_create_reports_each_entry(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    good = spec(sink.url + "/b", triggers.OnceTrigger(now_ms() + 60_000))
    bad = spec(sink.url + "/b", triggers.CronTrigger("not a cron"))
    first, failed, third = await client.create_many([("b1", good), ("b2", bad), ("b3", good)])
    assert isinstance(first, Created) and first.schedule.key == "b1"
    assert isinstance(third, Created) and third.schedule.key == "b3"
    assert isinstance(failed, InvalidArgument)
    assert "cron" in failed.field and "cron" in str(failed)
    listed = [s.key for s in (await client.list()).items]
    assert listed == ["b1", "b3"]


async def test_list_pages(client: ClockworkClient, sink: RecordingSink) -> None:
    s = spec(sink.url + "/l", triggers.OnceTrigger(now_ms() + 600_000))
    await client.create_many([(f"k{i:02d}", s) for i in range(25)])
    keys = [x.key async for x in client.list_all(page_size=10)]
    assert keys == [f"k{i:02d}" for i in range(25)]


async def test_exhausted_firings_are_dead_lettered_and_redrive_keeps_the_delivery_id(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    failing = True
    sink.responder = lambda path, n: 500 if failing else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=100)
    for key in ("dl-a", "dl-b"):
        await client.create(
            key, spec(sink.url + "/" + key, triggers.OnceTrigger(now_ms()), retry=retry)
        )
    await sink.wait_for("/dl-a", 2, timeout_s=10)
    await sink.wait_for("/dl-b", 2, timeout_s=10)
    await asyncio.sleep(0.5)
    letters = (await client.dead_letters()).items
    assert sorted(d.schedule_key for d in letters) == ["dl-a", "dl-b"]
    a = next(d for d in letters if d.schedule_key == "dl-a")
    assert a.attempts == 2 and a.last_status == 500 and "HTTP 500" in a.last_error
    original_id = sink.at("/dl-a")[0].delivery_id
    assert a.delivery_id == original_id

    failing = False
    done = await client.redrive(firing_ids=[a.firing_id])
    assert (done.redriven, done.skipped) == (1, 0)
    [*_, redelivered] = await sink.wait_for("/dl-a", 3, timeout_s=10)
    assert redelivered.delivery_id == original_id
    # Already redriven: skipped unless asked again; by schedule key.
    again = await client.redrive(DeadLetterRange(key="dl-a"))
    assert (again.redriven, again.skipped) == (0, 1)
    rest = await client.redrive()
    assert (rest.redriven, rest.skipped) == (1, 1)
    await sink.wait_for("/dl-b", 3, timeout_s=10)
    listed = (await client.dead_letters(DeadLetterRange(key="dl-a"))).items
    assert len(listed) == 1 and listed[0].redriven_ms is not None
    await asyncio.sleep(0.5)
    assert len(sink.at("/dl-a")) == 3 and len(sink.at("/dl-b")) == 3
    # The redriven attempt succeeded and is in the history.
    outcomes = [e.outcome for e in (await client.executions("dl-a")).items]
    assert outcomes[0] is Outcome.SUCCEEDED


async def test_dead_letter_range_is_validated(client: ClockworkClient) -> None:
    bad = DeadLetterRange(since_ms=now_ms(), until_ms=now_ms() - 1000)
    with pytest.raises(InvalidArgument) as err:
        await client.dead_letters(bad)
    assert err.value.field == "range.since"


async def test_ordering_key_delivers_in_order_waiting_for_retries(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    # The first delivery fails twice; the later ones of the same key must wait for it.
    sink.responder = lambda path, n: 503 if path == "/o/0" and n <= 2 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=5, initial_delay_ms=400)
    base = now_ms() + 500
    await client.create_many(
        [
            (
                f"ord-{i}",
                spec(
                    f"{sink.url}/o/{i}",
                    triggers.OnceTrigger(base + i * 100),
                    retry=retry,
                    ordering_key="order-42",
                ),
            )
            for i in range(3)
        ]
    )
    # Unordered neighbours of the same tenant are not held back.
    await client.create("free", spec(sink.url + "/free", triggers.OnceTrigger(base + 150)))
    await sink.wait_for("/o/2", 1, timeout_s=15)
    ordered = [r.path for r in sink.received if r.path.startswith("/o/")]
    assert ordered == ["/o/0", "/o/0", "/o/0", "/o/1", "/o/2"], ordered
    free = sink.at("/free")[0].received_ms
    assert free < sink.at("/o/1")[0].received_ms


async def test_connection_resets_are_retried_with_the_same_delivery_id(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: RESET if n <= 2 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=5, initial_delay_ms=150)
    await client.create(
        "reset", spec(sink.url + "/reset", triggers.OnceTrigger(now_ms()), retry=retry)
    )
    got = await sink.wait_for("/reset", 3, timeout_s=10)
    assert len({r.delivery_id for r in got}) == 1
    await asyncio.sleep(0.3)
    executions = (await client.executions("reset")).items
    assert [e.outcome for e in executions] == [
        Outcome.SUCCEEDED,
        Outcome.RETRYING,
        Outcome.RETRYING,
    ]
    assert executions[-1].status_code == 0 and executions[-1].error


async def test_429_retry_after_is_honoured_over_a_shorter_policy_delay(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: (429, {"Retry-After": "1"}) if n == 1 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=100)
    await client.create(
        "slow-down", spec(sink.url + "/429", triggers.OnceTrigger(now_ms()), retry=retry)
    )
    first, second = await sink.wait_for("/429", 2, timeout_s=10)
    assert second.received_ms - first.received_ms >= 950
    assert first.delivery_id == second.delivery_id


async def test_cluster_load_reports_the_in_process_worker(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    idle = await client.cluster_load()
    assert [w.shards for w in idle.workers] == [8]
    assert (idle.shard_count, idle.shards_owned) == (8, 8)
    due = now_ms() + 1200
    for i in range(5):
        await client.create(f"load-{i}", spec(sink.url + "/load", triggers.OnceTrigger(due)))
    ahead = await client.cluster_load()  # prefetched: due within the 2 s lookahead
    assert ahead.due_per_s == pytest.approx(5 / 2.0)
    assert ahead.workers[0].window_s == 2.0
    await sink.wait_for("/load", 5, timeout_s=10)
    after = await client.cluster_load()
    assert after.dispatch_per_s > 0
    assert after.lag_p99_ms >= 0
    assert after.due_per_s == 0
