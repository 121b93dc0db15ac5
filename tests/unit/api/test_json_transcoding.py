"""Requests from HTTP parts and replies to JSON, by protobuf's JSON mapping."""

from __future__ import annotations

import pytest

from clockwork_svc.api import http_rules, json_transcoding
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import tenants_pb2
from clockwork_svc.errors import InvalidArgument
from clockwork_svc.server.grpc_server import SERVICES

ROUTES = http_rules.routes(SERVICES)


def request(method: str, path: str, query: str = "", body: bytes = b"") -> object:
    route, values = http_rules.resolve(ROUTES, method, path)
    pairs = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    return json_transcoding.request_of(route, values, pairs, body)  # type: ignore[arg-type]


def refused(method: str, path: str, query: str = "", body: bytes = b"") -> InvalidArgument:
    with pytest.raises(InvalidArgument) as err:
        request(method, path, query, body)
    return err.value


def test_the_body_path_and_query_fill_the_request() -> None:
    created = request(
        "POST",
        "/v1/schedules",
        body=b'{"key": "k", "spec": {"cron": {"expression": "0 9 * * *", "timezone": "UTC"},'
        b' "http": {"url": "https://x.example"}, "payload": "aGk=", "relevancyWindow": "60s"},'
        b' "labels": {"team": "a"}}',
    )
    assert isinstance(created, pb.CreateScheduleRequest)
    assert created.spec.payload == b"hi" and created.spec.relevancy_window.seconds == 60
    assert created.labels == {"team": "a"}
    # Proto names are accepted beside JSON names.
    got = request("GET", "/v1/schedules/a/b", "upcoming_count=3&executionCount=2")
    assert got == pb.GetScheduleRequest(key="a/b", upcoming_count=3, execution_count=2)
    listed = request("GET", "/v1/schedules", "states=ACTIVE&states=PAUSED&keyPrefix=a")
    assert listed == pb.ListSchedulesRequest(states=[pb.ACTIVE, pb.PAUSED], key_prefix="a")
    letters = request("GET", "/v1/deadLetters", "range.since=2026-01-01T00:00:00Z&range.key=k")
    assert isinstance(letters, pb.ListDeadLettersRequest)
    assert letters.range.key == "k" and letters.range.since.seconds == 1767225600
    paused = request("POST", "/v1/schedules/k:pause")  # an empty body is an empty request
    assert paused == pb.PauseScheduleRequest(key="k")
    limits = request("PUT", "/v1/tenants/acme/limits", body=b'{"ratePerS": 5}')
    assert limits == tenants_pb2.SetTenantLimitsRequest(
        name="acme", limits=tenants_pb2.TenantLimits(rate_per_s=5)
    )
    bulk = request("POST", "/v1/schedules:bulk", body=b'{"dryRun": true}')
    assert isinstance(bulk, pb.BulkScheduleActionRequest) and bulk.dry_run


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "field"),
    [
        ("POST", "/v1/schedules", "", b'{"spek": {}}', "spek"),
        (
            "POST",
            "/v1/schedules",
            "",
            b'{"spec": {"relevancyWindow": "soon"}}',
            "spec.relevancy_window",
        ),
        ("POST", "/v1/schedules", "", b'{"spec": {"once": {"at": "x"}}}', "spec.once.at"),
        ("POST", "/v1/schedules", "", b'{"key": ["a"]}', "key"),
        ("POST", "/v1/schedules", "", b"{nope", "body"),
        ("POST", "/v1/schedules", "", b"\xff\xfe", "body"),
        ("POST", "/v1/schedules", "", b'"a string"', "body"),
        ("POST", "/v1/schedules", "key=k", b"{}", "key"),
        ("GET", "/v1/schedules", "", b'{"pageSize": 1}', "body"),
        ("GET", "/v1/schedules", "pageSize=many", b"", "page_size"),
        ("GET", "/v1/schedules", "pageSize=1&pageSize=2", b"", "page_size"),
        ("GET", "/v1/schedules", "nothing=1", b"", "nothing"),
        ("GET", "/v1/deadLetters", "range=1", b"", "range"),
        ("GET", "/v1/deadLetters", "range.nothing=1", b"", "range.nothing"),
        ("POST", "/v1/deadLetters:redrive", "", b'{"again": "yes"}', "again"),
        ("PUT", "/v1/tenants/acme/limits", "", b'{"ratePerS": "fast"}', "limits.rate_per_s"),
        ("POST", "/v1/schedules/k:pause", "", b'{"key": "other"}', "key"),
    ],
)
def test_bad_input_names_its_field(
    method: str, path: str, query: str, body: bytes, field: str
) -> None:
    error = refused(method, path, query, body)
    assert error.field == field, error
    assert error.message


def test_a_boolean_query_parameter() -> None:
    route, _ = http_rules.resolve(ROUTES, "GET", "/v1/tenants")
    assert route.rpc.name == "ListTenants"
    with pytest.raises(InvalidArgument) as err:
        json_transcoding.request_of(route, {}, [("pageSize", "-1")], b"")
    assert err.value.field == "page_size"


def test_replies_use_json_names_and_show_zero_values() -> None:
    reply = pb.RedriveDeadLettersResponse(redriven=2)
    assert json_transcoding.to_json(reply) == {"redriven": 2, "skipped": 0}
    schedule = pb.Schedule(key="k", version=3)
    rendered = json_transcoding.to_json(schedule)
    assert rendered["version"] == "3" and rendered["firedCount"] == "0"
