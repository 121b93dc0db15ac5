"""Property-based fuzzing of the HTTP/JSON API, against a real api on the SQLite store
(and on Cassandra when CLOCKWORK_CASSANDRA is set).

Requests go to every route with paths, query strings, bodies, content types and
credentials drawn from valid, mutated and junk ones: JSON built from generated
request messages, the same with fields renamed or retyped, arbitrary JSON and
arbitrary bytes. Property: every answer is JSON; an error is a 4xx whose body names
the gRPC status that HTTP status stands for, never a 5xx; and afterwards the
schedules made before the run are untouched.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from clockwork_svc.api import http_rules
from clockwork_svc.api.http_rules import Route
from clockwork_svc.api.status import http_status_of
from clockwork_svc.server.grpc_server import SERVICES
from tests.fuzz import wire
from tests.fuzz.test_grpc_fuzz import (
    ADMIN,
    BASELINE_TOKEN,
    FUZZ,
    TENANT,
    TENANT_TOKEN,
    FuzzTarget,
    target,  # noqa: F401 (fixture)
)

ROUTES = http_rules.routes(SERVICES)
STATUS_NAMES = {"UNIMPLEMENTED": 405}

_junk_text = st.text(max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _junk_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_junk_text, inner, max_size=4),
    max_leaves=12,
)
headers = st.sampled_from(
    [
        {"Authorization": f"Bearer {TENANT_TOKEN}"},
        {"Authorization": f"Bearer {ADMIN}", "Clockwork-Tenant": TENANT},
        {"Authorization": f"Bearer {ADMIN}"},
        {"Authorization": f"Bearer {TENANT_TOKEN}", "Clockwork-Tenant": "baseline"},
        {"Authorization": "Bearer not-a-token-0123456789"},
        {},
    ]
)


@st.composite
def paths(draw: st.DrawFn, route: Route) -> str:
    parts = []
    for segment in route.template.segments:
        if segment.variable:
            value = draw(st.sampled_from(["job-1", "a/b:c", ""]) | _junk_text)
            parts.append(urllib.parse.quote(value, safe="/" if segment.rest else ""))
        else:
            parts.append(segment.literal)
    path = "/" + "/".join(parts)
    return path + (":" + route.template.verb if route.template.verb else "")


@st.composite
def bodies(draw: st.DrawFn, route: Route) -> bytes:
    kind = draw(st.sampled_from(["generated", "renamed", "json", "bytes", "empty"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "empty":
        return b""
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    message = route.new_request()
    try:
        message.ParseFromString(draw(wire.request(route.rpc.input_type)))
        document: dict[str, Any] = json_format.MessageToDict(message)
    except (DecodeError, ValueError, TypeError, json_format.Error):
        document = {}
    if kind == "renamed" and document:
        field = draw(st.sampled_from(sorted(document)))
        document[draw(st.sampled_from([field + "x", field]))] = draw(json_values)
    return json.dumps(document).encode()


@st.composite
def queries(draw: st.DrawFn, route: Route) -> str:
    names = [f.json_name for f in route.rpc.input_type.fields] + ["range.since", "x.y", "nope"]
    pairs = draw(st.lists(st.tuples(st.sampled_from(names) | _junk_text, _junk_text), max_size=4))
    return urllib.parse.urlencode(pairs)


def send(port: int, method: str, path: str, body: bytes, sent: dict[str, str]) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=sent)
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def check(status: int, reply: Any, what: str) -> None:
    assert status < 500, what
    if status == 200:
        assert isinstance(reply, dict), what
        return
    error = reply["error"]
    assert error["code"] == status, what
    expected = STATUS_NAMES.get(error["status"])
    if status == 413:
        assert error["status"] == "RESOURCE_EXHAUSTED", what
    elif status == 415:
        assert error["status"] == "INVALID_ARGUMENT", what
    elif expected is not None:
        assert status == expected, what
    else:
        import grpc

        assert http_status_of(grpc.StatusCode[error["status"]]) == status, what
    assert error["message"], what


@pytest.fixture(scope="module")
def http_target(target: FuzzTarget) -> FuzzTarget:  # noqa: F811
    if not target.node.http_port:
        pytest.fail("the fuzz target runs without its HTTP API")
    return target


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.rpc.name)
@FUZZ
@given(data=st.data(), sent=headers)
def test_generated_http_requests_get_clean_answers(
    http_target: FuzzTarget, route: Route, data: st.DataObject, sent: dict[str, str]
) -> None:
    path = data.draw(paths(route))
    query = data.draw(queries(route)) if not route.body else ""
    body = data.draw(bodies(route)) if route.body or data.draw(st.booleans()) else b""
    content_type = data.draw(
        st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"])
    )
    full = path + ("?" + query if query else "")
    method = data.draw(st.sampled_from([route.http_method, route.http_method, "PATCH"]))
    status, reply = send(
        http_target.node.http_port, method, full, body, {**sent, "Content-Type": content_type}
    )
    check(status, reply, f"{method} {full} {body[:200]!r} as {sent}: {status} {reply}")


def test_baseline_is_intact_over_http(http_target: FuzzTarget) -> None:
    port = http_target.node.http_port
    for key, before in http_target.baseline.items():
        status, reply = send(
            port, "GET", f"/v1/schedules/{key}", b"", {"Authorization": f"Bearer {BASELINE_TOKEN}"}
        )
        assert status == 200, reply
        from clockwork_svc.api.v1 import scheduler_pb2 as pb

        stored = pb.Schedule.FromString(before)
        assert reply["id"] == stored.id and reply["version"] == str(stored.version)
        assert reply["spec"]["http"]["url"] == stored.spec.http.url
        assert base64.b64decode(reply["spec"].get("payload", "")) == stored.spec.payload
