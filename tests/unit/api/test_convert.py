"""clockwork_svc/api/v1/convert.py: what the server writes, the client reads back as
the same objects, and what the client reads converts back to the same message (the
CLI prints `--json` from that message)."""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from clockwork_svc.api.v1 import convert, tenants_pb2
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1.model import (
    DeadLetterInfo,
    DeadLetterRange,
    Page,
    SecretRotated,
    TenantCreated,
    TenantInfo,
    TokenIssued,
)
from clockwork_svc.domain import triggers
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision, WorkerLoad
from clockwork_svc.domain.model import (
    Created,
    DeadLetter,
    Execution,
    Outcome,
    RedriveResult,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    MisfirePolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits
from clockwork_svc.errors import (
    AlreadyExists,
    ClockworkError,
    InvalidArgument,
    NotFound,
    StoreUnavailable,
    Unavailable,
)

T0 = 1_700_000_000_123

SPECS = [
    ScheduleSpec(triggers.OnceTrigger(T0), HttpTarget("https://x.io/a")),
    ScheduleSpec(
        triggers.IntervalTrigger(1500, start_ms=T0, end_ms=T0 + 86_400_000, count=3),
        HttpTarget("https://x.io/b", "PATCH", (("A", "1"), ("B", "2"), ("c", "3")), 2500),
        payload=b"\x00\xff{}",
        retry=RetryPolicy(RetryKind.EXPONENTIAL, 7, 100, 900, 1.5, 60_000),
        relevancy_window_ms=5_000,
        jitter_ms=250,
        ordering_key="order-7",
        misfire=MisfirePolicy.SKIP,
        pause_after_failures=3,
    ),
    ScheduleSpec(
        triggers.CronTrigger("0 9 * * 1-5", "Europe/Paris", None, T0 + 10**9, None),
        KafkaTarget("topic.a", (("source", "test"),)),
        retry=RetryPolicy(RetryKind.NONE),
    ),
    ScheduleSpec(
        triggers.CronTrigger("*/5 * * * *", "UTC", T0, None, 10),
        HttpTarget("http://x.io/"),
        retry=RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=1),
    ),
]


def schedule(spec: ScheduleSpec, state: ScheduleState = ScheduleState.ACTIVE) -> Schedule:
    active = state is ScheduleState.ACTIVE
    return Schedule(
        tenant="acme",
        key="k/1",
        id="0123456789abcdef",
        spec=spec,
        state=state,
        version=4,
        created_ms=T0,
        updated_ms=T0 + 1,
        shard=13,
        next_fire_ms=T0 + 60_000 if active else None,
        last_fire_ms=T0 + 999 if state is not ScheduleState.PAUSED else None,
        last_outcome=Outcome.RETRYING if state is not ScheduleState.PAUSED else None,
        fired_count=2,
    )


def assert_message_round_trips(message: Message, back: Message) -> None:
    assert back == message
    assert back.SerializeToString(deterministic=True) == message.SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize("spec", SPECS)
def test_specs_round_trip(spec: ScheduleSpec) -> None:
    message = convert.spec_to_pb(spec)
    assert convert.spec_from_pb(message) == spec
    assert_message_round_trips(message, convert.spec_to_pb(convert.spec_from_pb(message)))


@pytest.mark.parametrize("state", list(ScheduleState))
@pytest.mark.parametrize("spec", SPECS)
def test_schedules_round_trip(spec: ScheduleSpec, state: ScheduleState) -> None:
    sent = schedule(spec, state)
    message = convert.schedule_to_pb(sent)
    assert convert.schedule_from_pb(message) == sent
    assert_message_round_trips(message, convert.schedule_to_pb(convert.schedule_from_pb(message)))


def test_a_next_fire_time_is_shown_only_while_active() -> None:
    paused = dataclasses.replace(schedule(SPECS[0]), state=ScheduleState.PAUSED)
    assert paused.next_fire_ms is not None
    message = convert.schedule_to_pb(paused)
    assert not message.HasField("next_fire_time")
    assert convert.schedule_from_pb(message).next_fire_ms is None


def test_created_and_schedule_pages_round_trip() -> None:
    created = Created(schedule(SPECS[1]), created=False)
    message = convert.created_to_pb(created)
    assert convert.created_from_pb(message) == created
    page = Page(tuple(schedule(s) for s in SPECS), "dG9rZW4=")
    listed = convert.schedule_page_to_pb(page)
    assert convert.schedule_page_from_pb(listed) == page
    assert_message_round_trips(
        listed, convert.schedule_page_to_pb(convert.schedule_page_from_pb(listed))
    )
    assert convert.schedule_page_from_pb(pb.ListSchedulesResponse()) == Page(())


def test_batch_answers_read_back_as_created_or_the_entry_error() -> None:
    outcomes: list[Created | ClockworkError] = [
        Created(schedule(SPECS[0]), True),
        InvalidArgument("requests[1].spec.http.url", "not http(s)"),
        AlreadyExists("schedule 'k' exists with a different spec"),
        StoreUnavailable("store timed out"),
        NotFound("gone"),
    ]
    message = convert.batch_to_pb(outcomes)
    assert [r.code for r in message.results] == [0, 3, 6, 14, 5]
    back = convert.batch_from_pb(message)
    assert back[0] == outcomes[0]
    invalid, exists, unavailable, missing = back[1:]
    assert isinstance(invalid, InvalidArgument)
    assert (invalid.field, invalid.message) == ("requests[1].spec.http.url", "not http(s)")
    assert isinstance(exists, AlreadyExists) and exists.status is grpc.StatusCode.ALREADY_EXISTS
    assert type(unavailable) is Unavailable and str(unavailable) == "store timed out"
    assert isinstance(missing, NotFound) and str(missing) == "gone"
    assert_message_round_trips(message, convert.batch_to_pb(back))


def execution(attempt: int, next_attempt_ms: int | None) -> Execution:
    return Execution(
        tenant="acme",
        schedule_key="k/1",
        firing_id=f"f{attempt}",
        delivery_id="msg_1",
        attempt=attempt,
        occurrence_ms=T0,
        due_ms=T0 + 5,
        started_ms=T0 + 7,
        duration_ms=1234,
        outcome=Outcome.RETRYING if next_attempt_ms else Outcome.SUCCEEDED,
        status_code=503 if next_attempt_ms else 200,
        error="HTTP 503" if next_attempt_ms else "",
        next_attempt_ms=next_attempt_ms,
    )


def test_executions_round_trip_naming_the_requested_schedule() -> None:
    page = Page((execution(2, None), execution(1, T0 + 2000)), "next")
    message = convert.execution_page_to_pb(page)
    assert convert.execution_page_from_pb(message, "acme", "k/1") == page
    assert_message_round_trips(
        message, convert.execution_page_to_pb(convert.execution_page_from_pb(message, "", "k/1"))
    )


def test_dead_letters_read_back_as_the_api_shows_them() -> None:
    letters = [
        DeadLetter("acme", "k/1", "sid", "f1", "msg_1", 3, 9, T0, 5, T0 + 10, 500, "HTTP 500"),
        DeadLetter("acme", "k/2", "sid", "f2", "msg_2", 3, 9, T0, 1, T0 + 20, 0, "", T0 + 30),
    ]
    message = convert.dead_letter_page_to_pb(Page(tuple(letters), ""))
    back = convert.dead_letter_page_from_pb(message)
    assert back == Page(tuple(DeadLetterInfo.of(d) for d in letters), "")
    assert back.items[1].redriven_ms == T0 + 30 and back.items[0].redriven_ms is None
    assert_message_round_trips(message, convert.dead_letter_page_to_pb(back))


@pytest.mark.parametrize(
    "window",
    [DeadLetterRange(), DeadLetterRange(T0, T0 + 1, "k"), DeadLetterRange(until_ms=T0)],
)
def test_dead_letter_ranges_round_trip(window: DeadLetterRange) -> None:
    assert convert.range_from_pb(convert.range_to_pb(window)) == window


def test_redrive_counts_round_trip() -> None:
    result = RedriveResult(redriven=3, skipped=1)
    assert convert.redrive_from_pb(convert.redrive_to_pb(result)) == result


def tenant(paused: bool) -> Tenant:
    return Tenant(
        name="acme",
        created_ms=T0,
        updated_ms=T0 + 5,
        version=7,
        signing_secrets=("whsec_a", "whsec_b"),
        token_hashes=("h1", "h2", "h3"),
        limits=TenantLimits(2.5, 3, 4, paused, 0.1),
        defaults=TenantDefaults(RetryPolicy(RetryKind.FIXED, 3, 250, 5000), 1_800_000),
    )


@pytest.mark.parametrize("paused", [False, True])
def test_tenants_read_back_with_their_secrets_only_counted(paused: bool) -> None:
    info = TenantInfo.of(tenant(paused))
    assert (info.signing_secret_count, info.token_count, info.paused) == (2, 3, paused)
    message = convert.tenant_to_pb(info)
    assert message.paused is paused
    assert convert.tenant_from_pb(message) == info
    assert_message_round_trips(message, convert.tenant_to_pb(convert.tenant_from_pb(message)))
    page = Page((info, TenantInfo("b", T0, T0, 1)), "YWNtZQ==")
    assert convert.tenant_page_from_pb(convert.tenant_page_to_pb(page)) == page


def test_answers_with_a_new_secret_round_trip() -> None:
    info = TenantInfo.of(tenant(False))
    created = TenantCreated(info, "cwt_x", "whsec_y")
    assert convert.tenant_created_from_pb(convert.tenant_created_to_pb(created)) == created
    rotated = SecretRotated(info, "whsec_z")
    assert convert.secret_rotated_from_pb(convert.secret_rotated_to_pb(rotated)) == rotated
    issued = TokenIssued(info, "cwt_w")
    assert convert.token_issued_from_pb(convert.token_issued_to_pb(issued)) == issued


def test_limits_leave_paused_to_pause_and_resume() -> None:
    message = convert.limits_to_pb(TenantLimits(1.5, paused=True))
    assert message == tenants_pb2.TenantLimits(rate_per_s=1.5)
    assert convert.limits_from_pb(message) == TenantLimits(1.5)


def test_cluster_load_round_trips_in_worker_order() -> None:
    def worker(name: str, due: float) -> WorkerLoad:
        return WorkerLoad(name, 8, due, 1, 2.5, 10.0, 99.5, 3, 2.0, T0)

    owners = ((0, "w-a", 7), (1, "w-b", 9))
    load = ClusterLoad(
        (worker("w-b", 1.25), worker("w-a", 4.0)), shard_count=16, shards_owned=16, owners=owners
    )
    message = convert.cluster_load_to_pb(load)
    assert [w.worker_id for w in message.workers] == ["w-a", "w-b"]
    back = convert.cluster_load_from_pb(message)
    assert back.workers == (worker("w-a", 4.0), worker("w-b", 1.25))
    assert (back.due_per_s, back.overdue, back.lag_p99_ms) == (5.25, 2, 99.5)
    assert back.owners == owners
    assert back.scale_decision is None
    assert_message_round_trips(message, convert.cluster_load_to_pb(back))


def test_a_scale_decision_round_trips_with_the_load() -> None:
    decision = ScaleDecision("cw/workers", 2, 3, "demand 40.0/s needs 3", T0, None, "op-1")
    load = ClusterLoad((), shard_count=8, shards_owned=8, scale_decision=decision)
    back = convert.cluster_load_from_pb(convert.cluster_load_to_pb(load))
    assert back.scale_decision == decision
    held = dataclasses.replace(decision, current_replicas=3, last_change_ms=T0 - 5_000)
    assert convert.scale_decision_from_pb(convert.scale_decision_to_pb(held)) == held


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"deployment": ""}, "deployment"),
        ({"reason": ""}, "reason"),
        ({"reason": "x" * 1025}, "reason"),
        ({"desired_replicas": 100_001}, "desired_replicas"),
        ({"decided_by": "x" * 600}, "decided_by"),
    ],
)
def test_a_bad_scale_decision_names_its_field(change: dict[str, Any], field: str) -> None:
    good = ScaleDecision("cw/workers", 2, 3, "demand", T0)
    message = convert.scale_decision_to_pb(dataclasses.replace(good, **change))
    with pytest.raises(InvalidArgument) as raised:
        convert.scale_decision_from_pb(message)
    assert raised.value.field == field
    message = convert.scale_decision_to_pb(good)
    message.ClearField("decide_time")
    with pytest.raises(InvalidArgument, match="decide_time"):
        convert.scale_decision_from_pb(message)


def test_a_reply_with_an_unknown_state_is_refused() -> None:
    message = convert.schedule_to_pb(schedule(SPECS[0]))
    message.state = 99  # type: ignore[assignment]
    with pytest.raises(InvalidArgument, match=r"schedule\.state"):
        convert.schedule_from_pb(message)
