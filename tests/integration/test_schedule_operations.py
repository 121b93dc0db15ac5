"""Schedule operations beyond the lifecycle, through the real gRPC API with a worker
delivering to a real HTTP receiver, on both stores: a schedule described with its
next occurrence times and latest executions, a trigger previewed without creating
anything, and a run triggered now."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clockwork_svc import app
from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import identity, triggers
from clockwork_svc.domain.labels import Selector, parse_selector
from clockwork_svc.domain.model import (
    BulkAction,
    ClusterLayout,
    Execution,
    Outcome,
    ScheduleQuery,
    ScheduleState,
)
from clockwork_svc.domain.spec import OverlapPolicy, RetryKind, RetryPolicy
from clockwork_svc.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from clockwork_svc.settings import CassandraSettings, ProcessSettings, StoreSettings
from tests.conftest import require_server
from tests.integration.test_dev_node import dev_settings, now_ms, spec
from tests.support.sink import RecordingSink

HOUR_MS = 3_600_000


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, sec, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
async def settings(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ProcessSettings]:
    """A dev node's settings on either store (a fresh keyspace for Cassandra)."""
    base = dev_settings(tmp_path)
    if request.param == "sqlite":
        yield base
        return
    address = require_server("CLOCKWORK_CASSANDRA")
    from clockwork_svc.storage import cassandra

    keyspace = "ops_" + uuid.uuid4().hex[:12]
    layout = ClusterLayout(shard_count=8, bucket_ms=60_000, created_ms=now_ms() - 60_000)
    await cassandra.create_cluster_for_tests([address], keyspace, layout)
    store = StoreSettings(
        kind="cassandra", cassandra=CassandraSettings(contact_points=(address,), keyspace=keyspace)
    )
    try:
        yield dataclasses.replace(base, store=store)
    finally:
        await cassandra.drop_keyspace_for_tests([address], keyspace)


@pytest.fixture
async def node(settings: ProcessSettings) -> AsyncIterator[app.Node]:
    async with app.running(settings, api=True, worker=True) as running:
        yield running


async def wait_for_executions(client: ClockworkClient, key: str, count: int) -> None:
    for _ in range(100):
        if len((await client.executions(key)).items) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{key}: fewer than {count} executions")


# --- describe: the future and the past ------------------------------------------------


async def test_get_lists_the_next_occurrences_and_the_latest_executions(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    start = (now_ms() // 1000 + 3600) * 1000
    hourly = triggers.IntervalTrigger(HOUR_MS, start_ms=start, count=4)
    await client.create("hourly", spec(sink.url + "/h", hourly))
    detail = await client.describe("hourly", upcoming=10, executions=10)
    assert detail.upcoming_ms == tuple(start + i * HOUR_MS for i in range(4))  # count: short
    assert detail.recent == ()
    assert (await client.describe("hourly", upcoming=2)).upcoming_ms == (start, start + HOUR_MS)
    await client.pause("hourly")
    assert (await client.describe("hourly")).upcoming_ms == ()

    await client.create("now", spec(sink.url + "/now", triggers.OnceTrigger(now_ms())))
    await sink.wait_for("/now", 1, timeout_s=10)
    await wait_for_executions(client, "now", 1)
    detail = await client.describe("now")
    assert detail.schedule.state is ScheduleState.COMPLETED
    assert detail.upcoming_ms == ()
    [execution] = detail.recent
    assert execution.outcome is Outcome.SUCCEEDED and execution.status_code == 200
    # A plain get does no more work than it did.
    plain = await client.get("now")
    assert plain == detail.schedule


async def test_get_refuses_counts_out_of_range(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("k", spec(sink.url + "/k", triggers.OnceTrigger(now_ms() + HOUR_MS)))
    for upcoming, executions, field in ((101, 0, "upcoming_count"), (0, 101, "execution_count")):
        with pytest.raises(InvalidArgument) as err:
            await client.describe("k", upcoming, executions)
        assert err.value.field == field


async def test_preview_shows_a_cron_across_both_dst_changes(client: ClockworkClient) -> None:
    nightly = triggers.CronTrigger("30 2 * * *", "Europe/Paris")
    spring = await client.preview(nightly, 4, utc_ms(2026, 3, 27))
    assert spring == [
        utc_ms(2026, 3, 27, 1, 30),  # 02:30 CET
        utc_ms(2026, 3, 28, 1, 30),
        utc_ms(2026, 3, 29, 1, 0),  # 02:30 does not exist: 03:00 CEST, once
        utc_ms(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]
    autumn = await client.preview(nightly, 3, utc_ms(2026, 10, 24))
    # 02:30 happens twice on 25 October: the job runs at the first.
    assert autumn == [
        utc_ms(2026, 10, 24, 0, 30),
        utc_ms(2026, 10, 25, 0, 30),
        utc_ms(2026, 10, 26, 1, 30),
    ]
    interval = triggers.IntervalTrigger(90_000, count=2)
    assert await client.preview(interval, 10, utc_ms(2030, 1, 1)) == [
        utc_ms(2030, 1, 1, 0, 1, 30),
        utc_ms(2030, 1, 1, 0, 3),
    ]
    assert await client.preview(triggers.OnceTrigger(utc_ms(2020, 1, 1)), 5) == []


@pytest.mark.parametrize(
    ("trigger", "count", "field"),
    [
        (triggers.CronTrigger("61 * * * *"), 10, "cron.expression"),
        (triggers.CronTrigger("* * * * *", "Mars/Olympus"), 10, "cron.timezone"),
        (triggers.IntervalTrigger(10), 10, "interval.every"),
        (triggers.CronTrigger("* * * * *"), 101, "count"),
    ],
)
async def test_preview_names_the_bad_field(
    client: ClockworkClient, trigger: triggers.Trigger, count: int, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await client.preview(trigger, count)
    assert err.value.field == field


# --- trigger now ------------------------------------------------------------------------


async def test_trigger_runs_once_now_and_leaves_the_timetable(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    start = (now_ms() // 1000 + 3600) * 1000
    hourly = triggers.IntervalTrigger(HOUR_MS, start_ms=start)
    created = await client.create("hourly", spec(sink.url + "/hourly", hourly))

    first = await client.trigger("hourly", b"override", request_id="req-1")
    assert first.triggered and first.delivery_id.startswith("msg_")
    [got] = await sink.wait_for("/hourly", 1, timeout_s=10)
    assert got.body == b"override" and got.delivery_id == first.delivery_id

    repeat = await client.trigger("hourly", b"override", request_id="req-1")
    assert repeat == dataclasses.replace(first, triggered=False)
    plain = await client.trigger("hourly")
    assert plain.triggered and plain.delivery_id not in (first.delivery_id,)
    await sink.wait_for("/hourly", 2, timeout_s=10)
    await asyncio.sleep(0.5)
    received = sink.at("/hourly")
    assert len(received) == 2 and received[1].body == b'{"hello":"world"}'

    await wait_for_executions(client, "hourly", 2)
    after = await client.describe("hourly")
    assert after.upcoming_ms[0] == start
    assert after.schedule.next_fire_ms == created.schedule.next_fire_ms
    assert after.schedule.fired_count == 0 and after.schedule.version == 1
    assert {e.delivery_id for e in after.recent} == {first.delivery_id, plain.delivery_id}


async def test_trigger_of_a_paused_one_shot_fires_and_the_one_shot_still_waits(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    later = now_ms() + HOUR_MS
    await client.create("later", spec(sink.url + "/later", triggers.OnceTrigger(later)))
    await client.pause("later")
    await client.trigger("later")
    await sink.wait_for("/later", 1, timeout_s=10)
    await wait_for_executions(client, "later", 1)
    resumed = await client.resume("later")
    assert resumed.state is ScheduleState.ACTIVE and resumed.fired_count == 0
    assert (await client.describe("later")).upcoming_ms == (later,)


async def test_a_triggered_run_is_retried_and_dead_lettered_with_its_payload(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    failing = True
    sink.responder = lambda path, n: 500 if failing else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=100)
    start = now_ms() + HOUR_MS
    await client.create(
        "flaky", spec(sink.url + "/flaky", triggers.OnceTrigger(start), retry=retry)
    )
    run = await client.trigger("flaky", b"mine")
    attempts = await sink.wait_for("/flaky", 2, timeout_s=10)
    assert [(a.body, a.delivery_id) for a in attempts] == [(b"mine", run.delivery_id)] * 2
    letter = None
    for _ in range(100):
        letters = (await client.dead_letters(DeadLetterRange(key="flaky"))).items
        if letters:
            [letter] = letters
            break
        await asyncio.sleep(0.1)
    assert letter is not None and letter.delivery_id == run.delivery_id
    failing = False
    await client.redrive(firing_ids=[letter.firing_id])
    *_, redriven = await sink.wait_for("/flaky", 3, timeout_s=10)
    assert (redriven.body, redriven.delivery_id) == (b"mine", run.delivery_id)


async def test_trigger_refuses_what_it_cannot_do(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    await client.create("gone", spec(sink.url + "/gone", triggers.OnceTrigger(now_ms() + HOUR_MS)))
    await client.cancel("gone")
    with pytest.raises(FailedPrecondition, match="cancelled"):
        await client.trigger("gone")
    with pytest.raises(NotFound):
        await client.trigger("never-created")
    await client.create("ok", spec(sink.url + "/ok", triggers.OnceTrigger(now_ms() + HOUR_MS)))
    for kwargs, field in (
        ({"payload": b"x" * (64 * 1024 + 1)}, "payload"),
        ({"request_id": "has space"}, "request_id"),
        ({"request_id": "r" * 201}, "request_id"),
    ):
        with pytest.raises(InvalidArgument) as err:
            await client.trigger("ok", **kwargs)
        assert err.value.field == field
    await asyncio.sleep(0.3)
    assert sink.at("/ok") == [] and sink.at("/gone") == []


# --- backfill ---------------------------------------------------------------------------


async def test_backfill_fires_past_occurrences_in_order_with_their_delivery_ids(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    start = (now_ms() // HOUR_MS - 10) * HOUR_MS
    hourly = triggers.IntervalTrigger(HOUR_MS, start_ms=start)
    created = (await client.create("hourly", spec(sink.url + "/hourly", hourly))).schedule
    done = await client.backfill("hourly", start + 1, start + 4 * HOUR_MS)
    expected = [start + i * HOUR_MS for i in (1, 2, 3)]
    assert (done.count, done.first_ms, done.last_ms) == (3, expected[0], expected[-1])
    got = await sink.wait_for("/hourly", 3, timeout_s=10)
    ids = [identity.delivery_id(created.id, ms) for ms in expected]
    assert sorted(r.delivery_id for r in got) == sorted(ids)
    await wait_for_executions(client, "hourly", 3)
    executions = (await client.executions("hourly")).items
    assert sorted(e.occurrence_ms for e in executions) == expected
    # In order: each due after the one before.
    by_occurrence = sorted(executions, key=lambda e: e.occurrence_ms)
    assert [e.due_ms for e in by_occurrence] == sorted(e.due_ms for e in by_occurrence)
    after = await client.get("hourly")
    assert (after.next_fire_ms, after.fired_count) == (created.next_fire_ms, 0)
    empty = await client.backfill("hourly", start + 1, start + 2)
    assert (empty.count, empty.first_ms) == (0, None)


async def test_backfill_refuses_what_it_cannot_do(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    now = now_ms()
    every_second = triggers.IntervalTrigger(1000, start_ms=now - 30 * 86_400_000)
    await client.create("busy", spec(sink.url + "/busy", every_second))
    for start, end, field in (
        (now - 86_400_000, now, "end"),  # 86,400 occurrences
        (now - 1000, now + 60_000, "end"),  # the future
        (now - 1000, now - 2000, "end"),  # backwards
    ):
        with pytest.raises(InvalidArgument) as err:
            await client.backfill("busy", start, end)
        assert err.value.field == field
    await client.pause("busy")
    with pytest.raises(FailedPrecondition, match="paused"):
        await client.backfill("busy", now - 5000, now)
    with pytest.raises(NotFound):
        await client.backfill("never-created", now - 5000, now)
    await asyncio.sleep(0.3)
    assert sink.at("/busy") == []


# --- pause with a note; pause after failures ---------------------------------------------


async def test_a_pause_keeps_its_note_until_the_resume(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    later = triggers.OnceTrigger(now_ms() + HOUR_MS)
    await client.create("job", spec(sink.url + "/job", later))
    paused = await client.pause("job", "ann: migrating the receiver, INC-42")
    assert paused.note == "ann: migrating the receiver, INC-42"
    again = await client.pause("job", "bob: a second pause")
    assert again.note == paused.note and again.version == paused.version
    [listed] = (await client.list()).items
    assert listed.note == paused.note
    resumed = await client.resume("job")
    assert resumed.note == "" and resumed.state is ScheduleState.ACTIVE
    with pytest.raises(InvalidArgument) as err:
        await client.pause("job", "x" * 1025)
    assert err.value.field == "note"
    with pytest.raises(InvalidArgument) as err:
        await client.create("bad", spec(sink.url + "/bad", later, pause_after_failures=1001))
    assert err.value.field == "spec.pause_after_failures"


async def test_a_schedule_pauses_itself_after_failures_in_a_row(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 500
    start = (now_ms() // 1000 + 1) * 1000
    every_second = triggers.IntervalTrigger(1000, start_ms=start)
    no_retry = RetryPolicy(RetryKind.NONE)
    await client.create(
        "doomed",
        spec(sink.url + "/doomed", every_second, retry=no_retry, pause_after_failures=3),
    )
    for _ in range(150):
        schedule = await client.get("doomed")
        if schedule.state is ScheduleState.PAUSED:
            break
        await asyncio.sleep(0.1)
    assert schedule.state is ScheduleState.PAUSED
    # Three in a row pause it (a fourth, due a second later, may fail before the pause).
    assert schedule.failures_in_row in (3, 4)
    assert "occurrences in a row failed" in schedule.note and "HTTP 500" in schedule.note
    sent = len(sink.at("/doomed"))
    assert sent == schedule.failures_in_row
    await asyncio.sleep(1.5)
    assert len(sink.at("/doomed")) == sent  # paused: nothing more
    resumed = await client.resume("doomed")
    assert (resumed.failures_in_row, resumed.note) == (0, "")
    sink.responder = lambda path, n: 200
    await sink.wait_for("/doomed", sent + 2, timeout_s=10)
    await client.cancel("doomed")


# --- response capture ---------------------------------------------------------------------


async def test_an_execution_keeps_the_start_of_the_response(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    headers = {"X-Request-Id": "rcv-42", "Content-Type": "application/json"}
    sink.responder = lambda path, n: (
        (202, headers, b'{"queued":true}') if path == "/small" else (200, {}, b"y" * 3000)
    )
    for key in ("small", "big"):
        await client.create(key, spec(sink.url + "/" + key, triggers.OnceTrigger(now_ms())))
    for key in ("small", "big"):
        await wait_for_executions(client, key, 1)
    [small] = (await client.executions("small")).items
    assert small.status_code == 202 and small.response_body == b'{"queued":true}'
    assert dict(small.response_headers) == {
        "Content-Length": "15",
        "Content-Type": "application/json",
        "X-Request-Id": "rcv-42",
    }
    [big] = (await client.executions("big")).items
    assert big.response_body == b"y" * 1024  # the default share
    # get shows the same record among the latest executions.
    assert (await client.describe("small")).recent == (small,)


# --- labels and search ---------------------------------------------------------------------


async def test_labels_select_schedules_and_can_be_replaced(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    later = triggers.OnceTrigger(now_ms() + HOUR_MS)
    for i in range(12):
        labels = {"team": "payments" if i % 2 else "search", "env": "prod" if i % 3 else "dev"}
        await client.create(f"job-{i:02d}", spec(sink.url + "/x", later), labels)
    await client.create("other", spec(sink.url + "/x", later))
    await client.pause("job-01")

    async def keys(query: ScheduleQuery, page_size: int = 100) -> list[str]:
        return [s.key async for s in client.list_all(page_size, query)]

    payments = [f"job-{i:02d}" for i in range(12) if i % 2]
    assert await keys(ScheduleQuery(selector=parse_selector("team=payments"))) == payments
    assert await keys(ScheduleQuery(selector=parse_selector("team=payments")), 2) == payments
    prod_payments = [k for k in payments if int(k[-2:]) % 3]
    selector = parse_selector("team=payments,env!=dev")
    assert await keys(ScheduleQuery(selector=selector)) == prod_payments
    assert await keys(ScheduleQuery(selector=parse_selector("!team"))) == ["other"]
    paused = frozenset({ScheduleState.PAUSED})
    assert await keys(ScheduleQuery(prefix="job-0", states=paused)) == ["job-01"]
    [job] = (await client.list(10, "", ScheduleQuery(prefix="job-03"))).items
    assert dict(job.labels) == {"team": "payments", "env": "dev"}

    # A repeated create must name the same labels.
    with pytest.raises(AlreadyExists, match="labels"):
        await client.create("job-03", spec(sink.url + "/x", later), {"team": "search"})
    relabelled = await client.set_labels("job-03", {"team": "search"})
    assert relabelled.labels == (("team", "search"),) and relabelled.version == job.version
    assert "job-03" not in await keys(ScheduleQuery(selector=parse_selector("team=payments")))


@pytest.mark.parametrize(
    ("labels", "named"),
    [
        ({"bad key": "x"}, "'bad key'"),
        ({"team": "x" * 64}, "'team'"),
        ({"UPPER.example.com/a": "x"}, "'UPPER.example.com/a'"),
        ({f"k{i}": "v" for i in range(33)}, "at most 32"),
    ],
)
async def test_bad_labels_are_refused_naming_the_label(
    client: ClockworkClient, sink: RecordingSink, labels: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await client.create("k", spec(sink.url + "/x", triggers.OnceTrigger(now_ms())), labels)
    assert err.value.field == "labels" and named in err.value.message


async def test_a_bad_listing_filter_names_its_field(client: ClockworkClient) -> None:
    bad = ScheduleQuery(selector=Selector((), "team>payments"))
    with pytest.raises(InvalidArgument) as err:
        await client.list(10, "", bad)
    assert err.value.field == "label_selector"
    with pytest.raises(InvalidArgument) as err:
        await client.list(10, "", ScheduleQuery(prefix="has space"))
    assert err.value.field == "key_prefix"


# --- bulk actions ---------------------------------------------------------------------------


async def test_bulk_actions_apply_once_per_schedule_across_pages_and_retries(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    later = triggers.OnceTrigger(now_ms() + HOUR_MS)
    for i in range(30):
        team = "payments" if i % 3 else "search"
        await client.create(f"job-{i:02d}", spec(sink.url + f"/job-{i:02d}", later), {"team": team})
    payments = [f"job-{i:02d}" for i in range(30) if i % 3]
    selection = ScheduleQuery(selector=parse_selector("team=payments"))

    preview = await client.bulk(BulkAction.PAUSE, selection, dry_run=True, page_size=7)
    assert (preview.matched, preview.applied) == (20, 0)
    assert list(preview.first_keys) == payments[:20]
    assert {s.state async for s in client.list_all()} == {ScheduleState.ACTIVE}

    # A call cut short after its first page, then the whole call again (a retry): each
    # schedule is paused once.
    first = await client.bulk(BulkAction.PAUSE, selection, note="ops: INC-7", page_size=20)
    assert (first.matched, first.applied, first.skipped, first.failed) == (20, 20, 0, 0)
    again = await client.bulk(BulkAction.PAUSE, selection, note="ops: INC-7", page_size=6)
    assert (again.matched, again.applied, again.skipped, again.failed) == (20, 0, 20, 0)
    only_paused = ScheduleQuery(states=frozenset({ScheduleState.PAUSED}))
    paused = [s async for s in client.list_all(query=only_paused)]
    assert [s.key for s in paused] == payments and {s.note for s in paused} == {"ops: INC-7"}

    triggered = await client.bulk(BulkAction.TRIGGER, selection, request_id="run-1", page_size=8)
    repeat = await client.bulk(BulkAction.TRIGGER, selection, request_id="run-1")
    assert (triggered.applied, repeat.applied, repeat.skipped) == (20, 0, 20)
    for key in payments:
        await sink.wait_for("/" + key, 1, timeout_s=10)
    await asyncio.sleep(0.5)
    assert all(len(sink.at("/" + key)) == 1 for key in payments)

    resumed = await client.bulk(BulkAction.RESUME, selection)
    assert (resumed.applied, resumed.skipped) == (20, 0)
    cancelled = await client.bulk(BulkAction.CANCEL, ScheduleQuery(prefix="job-0"))
    assert (cancelled.matched, cancelled.applied) == (10, 10)
    # Resuming a cancelled schedule has nothing to do: skipped, not failed.
    after = await client.bulk(BulkAction.RESUME, ScheduleQuery(prefix="job-0"))
    assert (after.applied, after.skipped, after.failed) == (0, 10, 0)
    with pytest.raises(InvalidArgument) as err:
        await client.bulk(BulkAction.PAUSE, ScheduleQuery())
    assert err.value.field == "label_selector"


# --- overlap policy; missed occurrences are visible ---------------------------------------------


def every(ms: int, first_in_ms: int = 1000) -> triggers.IntervalTrigger:
    return triggers.IntervalTrigger(ms, start_ms=(now_ms() // 1000) * 1000 + first_in_ms)


async def wait_for_outcome(client: ClockworkClient, key: str, outcome: Outcome) -> list[Execution]:
    for _ in range(150):
        found = [e for e in (await client.executions(key)).items if e.outcome is outcome]
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{key}: no {outcome.name} execution")


async def test_overlap_skip_records_the_occurrences_due_while_a_retry_is_pending(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.responder = lambda path, n: 500 if n == 1 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=4500)
    await client.create(
        "slow",
        spec(sink.url + "/slow", every(1500), retry=retry, overlap=OverlapPolicy.SKIP),
    )
    skipped = await wait_for_outcome(client, "slow", Outcome.SKIPPED)
    assert "previous delivery was still running" in skipped[0].error
    # The retry of the first occurrence is sent, and the timetable goes on after it.
    received = await sink.wait_for("/slow", 3, timeout_s=15)
    assert received[1].delivery_id == received[0].delivery_id  # the retry
    sent_ids = {r.delivery_id for r in received}
    assert not sent_ids & {e.delivery_id for e in skipped}  # a skipped one is never sent
    await client.cancel("slow")


async def test_overlap_buffer_one_sends_each_delivery_after_the_previous_ends(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    sink.delay_s = 1.6  # each callback takes longer than the interval
    await client.create(
        "buffered", spec(sink.url + "/buffered", every(1000), overlap=OverlapPolicy.BUFFER_ONE)
    )
    received = await sink.wait_for("/buffered", 4, timeout_s=15)
    await client.cancel("buffered")
    # Never two at once: each request arrived after the previous one was answered.
    for before, after in itertools.pairwise(received):
        assert after.received_ms >= before.received_ms + 1600 - 50


async def test_an_overlap_policy_with_an_ordering_key_is_refused(
    client: ClockworkClient, sink: RecordingSink
) -> None:
    with_key = spec(sink.url + "/x", every(1000), ordering_key="o", overlap=OverlapPolicy.SKIP)
    with pytest.raises(InvalidArgument) as err:
        await client.create("k", with_key)
    assert err.value.field == "spec.overlap"


async def test_occurrences_missed_while_no_worker_ran_are_recorded(
    settings: ProcessSettings, sink: RecordingSink
) -> None:
    """The api runs without a worker for a few occurrences of an every-second schedule;
    once a worker starts, the misfire policy (FIRE_LATEST) sends the latest missed one
    and records the others as one SKIPPED execution naming how many."""
    async with app.running(settings, api=True, worker=False) as api_only:
        assert api_only.api is not None
        address = f"127.0.0.1:{api_only.api.port}"
        async with ClockworkClient(ClientSettings(address, tenant="acme")) as c:
            await c.create("ticker", spec(sink.url + "/ticker", every(1000, 0)))
        await asyncio.sleep(5.5)
    async with app.running(settings, api=True, worker=True) as node:
        assert node.api is not None
        address = f"127.0.0.1:{node.api.port}"
        async with ClockworkClient(ClientSettings(address, tenant="acme")) as c:
            [record] = await wait_for_outcome(c, "ticker", Outcome.SKIPPED)
            await c.cancel("ticker")
    assert "missed (misfire FIRE_LATEST)" in record.error
    count = int(record.error.split(" ", 1)[0])
    assert 3 <= count <= 6, record.error


async def test_overlap_skip_holds_across_a_worker_restart(
    settings: ProcessSettings, sink: RecordingSink
) -> None:
    """The first delivery fails and its retry is due in 6 s; the worker stops and a new
    one starts meanwhile. The new one loads the stored turn of the pending retry: the
    occurrences due before it are skipped, and the retry goes first."""
    sink.responder = lambda path, n: 500 if n == 1 else 200
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=6000)
    overlapping = spec(sink.url + "/job", every(1000), retry=retry, overlap=OverlapPolicy.SKIP)
    async with app.running(settings, api=True, worker=True) as first:
        assert first.api is not None
        address = f"127.0.0.1:{first.api.port}"
        async with ClockworkClient(ClientSettings(address, tenant="acme")) as c:
            await c.create("job", overlapping)
            [failed] = await sink.wait_for("/job", 1, timeout_s=10)
            await wait_for_outcome(c, "job", Outcome.RETRYING)
    async with app.running(settings, api=True, worker=True) as second:
        assert second.api is not None
        address = f"127.0.0.1:{second.api.port}"
        async with ClockworkClient(ClientSettings(address, tenant="acme")) as c:
            await wait_for_outcome(c, "job", Outcome.SKIPPED)
            received = await sink.wait_for("/job", 2, timeout_s=15)
            await c.cancel("job")
    # The first thing sent after the restart is the pending retry, not an occurrence.
    assert received[1].delivery_id == failed.delivery_id and received[1].status == 200
