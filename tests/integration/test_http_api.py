"""The HTTP/JSON API on a real node (both stores), with authentication on: what a
JSON call does is what its gRPC twin does, seen through the gRPC client, and a
callback created over HTTP reaches a real receiver."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from clockwork_svc import app
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain.model import ScheduleState
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.settings import ProcessSettings
from tests.integration.test_schedule_operations import settings  # noqa: F401 (fixture)
from tests.support.sink import RecordingSink

ACME = "acme-token-0123456789"
GLOBEX = "globex-token-0123456789"
ADMIN = "admin-token-0123456789"


@pytest.fixture
async def node(settings: ProcessSettings) -> AsyncIterator[app.Node]:  # noqa: F811
    auth = AuthSettings.from_pairs(f"acme:{ACME},globex:{GLOBEX}", admin_token=ADMIN)
    api = dataclasses.replace(settings.api, auth=auth, http_listen=("127.0.0.1", 0))
    async with app.running(dataclasses.replace(settings, api=api), api=True, worker=True) as n:
        yield n


@pytest.fixture
async def http(node: app.Node) -> AsyncIterator[Http]:
    assert node.http is not None
    async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http.port}") as session:
        yield Http(session)


@pytest.fixture
async def grpc_acme(node: app.Node) -> AsyncIterator[ClockworkClient]:
    assert node.api is not None
    grpc_settings = ClientSettings(server=f"127.0.0.1:{node.api.port}", token=ACME)
    async with ClockworkClient(grpc_settings) as client:
        yield client


@dataclasses.dataclass
class Http:
    session: aiohttp.ClientSession

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = ACME,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        payload = _chunks(data) if data is not None else None
        async with self.session.request(
            method, path, json=body, data=payload, headers=sent
        ) as reply:
            return reply.status, await reply.json(), dict(reply.headers)


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 65536):
        yield data[start : start + 65536]


def at(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat().replace("+00:00", "Z")


def one_shot(url: str, when: str, payload: bytes = b'{"n":1}') -> dict[str, Any]:
    return {
        "once": {"at": when},
        "http": {"url": url},
        "payload": base64.b64encode(payload).decode(),
    }


async def test_a_schedule_created_over_http_fires_and_is_the_grpc_apis(
    http: Http, grpc_acme: ClockworkClient, sink: RecordingSink
) -> None:
    status, reply, headers = await http.call(
        "POST",
        "/v1/schedules",
        {"key": "billing/inv:1", "spec": one_shot(sink.url + "/cb", at(timedelta(seconds=1)))},
    )
    assert status == 200, reply
    assert reply["created"] is True
    assert reply["schedule"]["key"] == "billing/inv:1"
    assert reply["schedule"]["state"] == "ACTIVE"
    assert headers["Cache-Control"] == "no-store"
    [got] = await sink.wait_for("/cb", 1, timeout_s=15)
    assert got.body == b'{"n":1}'
    # The same schedule, read both ways: a key with `/` and `:` in the path as is.
    schedule = await grpc_acme.get("billing/inv:1")
    read: dict[str, Any] = {}
    for _ in range(100):  # the execution is recorded just after the delivery
        status, read, _ = await http.call("GET", "/v1/schedules/billing/inv:1?executionCount=5")
        assert status == 200
        if read["state"] == "COMPLETED" and read["recentExecutions"]:
            break
        await asyncio.sleep(0.1)
    assert read["id"] == schedule.id and read["state"] == "COMPLETED"
    assert read["recentExecutions"][0]["statusCode"] == 200
    status, listed, _ = await http.call("GET", "/v1/executions?key=billing/inv:1")
    assert status == 200 and listed["executions"][0]["outcome"] == "SUCCEEDED"


async def test_pause_over_http_is_seen_by_grpc_and_resume_clears_it(
    http: Http, grpc_acme: ClockworkClient, sink: RecordingSink
) -> None:
    spec = one_shot(sink.url + "/p", at(timedelta(hours=1)))
    assert (await http.call("POST", "/v1/schedules", {"key": "p:1", "spec": spec}))[0] == 200
    # `p:1:pause`: the verb is after the last colon.
    status, paused, _ = await http.call("POST", "/v1/schedules/p:1:pause", {"note": "audit"})
    assert status == 200, paused
    seen = await grpc_acme.get("p:1")
    assert seen.state is ScheduleState.PAUSED and seen.note == "audit"
    # A key whose last part looks like a verb is reached percent-encoded.
    status, reply, _ = await http.call("GET", "/v1/schedules/p%3A1")
    assert status == 200 and reply["pauseNote"] == "audit"
    status, resumed, _ = await http.call("POST", "/v1/schedules/p:1:resume")
    assert status == 200 and resumed["state"] == "ACTIVE"
    assert (await grpc_acme.get("p:1")).state is ScheduleState.ACTIVE
    status, listed, _ = await http.call("GET", "/v1/schedules?states=ACTIVE&keyPrefix=p:")
    assert status == 200 and [s["key"] for s in listed["schedules"]] == ["p:1"]


async def test_errors_carry_the_status_the_message_and_the_field(
    http: Http, sink: RecordingSink
) -> None:
    good = one_shot(sink.url + "/e", at(timedelta(hours=1)))
    cases: list[tuple[str, str, Any, dict[str, Any], int, str, str]] = [
        # method, path, body, call options, http status, grpc status, field
        (
            "POST",
            "/v1/schedules",
            {"key": "e", "spec": {"cron": {"expression": "x"}, "http": good["http"]}},
            {},
            400,
            "INVALID_ARGUMENT",
            "spec.cron.expression",
        ),
        ("POST", "/v1/schedules", {"key": "e", "spek": {}}, {}, 400, "INVALID_ARGUMENT", "spek"),
        (
            "POST",
            "/v1/schedules",
            {"key": "e", "spec": {"once": {"at": "tomorrow"}}},
            {},
            400,
            "INVALID_ARGUMENT",
            "spec.once.at",
        ),
        ("POST", "/v1/schedules", {"key": 5}, {}, 400, "INVALID_ARGUMENT", "key"),
        ("POST", "/v1/schedules", None, {"data": b"{not json"}, 400, "INVALID_ARGUMENT", "body"),
        ("POST", "/v1/schedules", None, {"data": b"[1]"}, 400, "INVALID_ARGUMENT", "body"),
        ("GET", "/v1/schedules?pageSize=x", None, {}, 400, "INVALID_ARGUMENT", "page_size"),
        ("GET", "/v1/schedules?nope=1", None, {}, 400, "INVALID_ARGUMENT", "nope"),
        (
            "GET",
            "/v1/schedules?labelSelector=a%20like%20b",
            None,
            {},
            400,
            "INVALID_ARGUMENT",
            "label_selector",
        ),
        ("GET", "/v1/schedules/missing", None, {}, 404, "NOT_FOUND", ""),
        ("GET", "/v1/schedules", None, {"token": None}, 401, "UNAUTHENTICATED", ""),
        (
            "GET",
            "/v1/schedules",
            None,
            {"token": "wrong-token-0123456789"},
            401,
            "UNAUTHENTICATED",
            "",
        ),
        ("GET", "/v1/tenants", None, {}, 403, "PERMISSION_DENIED", ""),
        ("DELETE", "/v1/schedules/e", None, {}, 405, "UNIMPLEMENTED", ""),
        ("GET", "/v1/nothing", None, {}, 404, "NOT_FOUND", ""),
    ]
    for method, path, body, options, http_status, grpc_status, field in cases:
        status, reply, _ = await http.call(method, path, body, **options)
        assert status == http_status, (path, body, reply)
        error = reply["error"]
        assert (error["code"], error["status"], error["field"]) == (
            http_status,
            grpc_status,
            field,
        ), (path, body, error)
        assert error["message"]


async def test_content_type_size_and_a_taken_key_are_refused(
    http: Http, node: app.Node, sink: RecordingSink
) -> None:
    spec = one_shot(sink.url + "/s", at(timedelta(hours=1)))
    body = b'{"key": "s", "spec": {}}'
    status, reply, _ = await http.call(
        "POST", "/v1/schedules", data=body, headers={"Content-Type": "text/plain"}
    )
    assert status == 415 and reply["error"]["field"] == "Content-Type"
    huge = b'{"key": "s", "note": "' + b"x" * (2 * 8 * 1024 * 1024) + b'"}'
    status, reply, _ = await http.call(
        "POST", "/v1/schedules/s:pause", data=huge, headers={"Content-Type": "application/json"}
    )
    assert status == 413 and reply["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert (await http.call("POST", "/v1/schedules", {"key": "s", "spec": spec}))[0] == 200
    again = await http.call("POST", "/v1/schedules", {"key": "s", "spec": spec})
    assert again[0] == 200 and again[1]["created"] is False
    other = {**spec, "payload": base64.b64encode(b"other").decode()}
    status, reply, _ = await http.call("POST", "/v1/schedules", {"key": "s", "spec": other})
    assert status == 409 and reply["error"]["status"] == "ALREADY_EXISTS"
    status, reply, _ = await http.call("POST", "/v1/schedules/s:cancel")
    assert status == 200 and reply["state"] == "CANCELLED"
    status, reply, _ = await http.call("POST", "/v1/schedules/s:trigger", {})
    assert status == 409 and reply["error"]["status"] == "FAILED_PRECONDITION"
    # The path and the body must not disagree on the key.
    status, reply, _ = await http.call("POST", "/v1/schedules/s:pause", {"key": "other"})
    assert status == 400 and reply["error"]["field"] == "key"


async def test_a_tenant_cannot_see_or_touch_another_tenants_schedule(
    http: Http, sink: RecordingSink
) -> None:
    spec = one_shot(sink.url + "/t", at(timedelta(hours=1)))
    assert (await http.call("POST", "/v1/schedules", {"key": "mine", "spec": spec}))[0] == 200
    for method, path in (
        ("GET", "/v1/schedules/mine"),
        ("POST", "/v1/schedules/mine:pause"),
        ("POST", "/v1/schedules/mine:cancel"),
        ("POST", "/v1/schedules/mine:trigger"),
    ):
        status, reply, _ = await http.call(method, path, token=GLOBEX)
        assert status == 404, (path, reply)
    status, listed, _ = await http.call("GET", "/v1/schedules", token=GLOBEX)
    assert status == 200 and listed["schedules"] == []
    # Naming another tenant with a tenant token is refused; an admin may.
    status, _, _ = await http.call(
        "GET", "/v1/schedules/mine", token=GLOBEX, headers={"Clockwork-Tenant": "acme"}
    )
    assert status == 401
    status, reply, _ = await http.call(
        "GET", "/v1/schedules/mine", token=ADMIN, headers={"Clockwork-Tenant": "acme"}
    )
    assert status == 200 and reply["tenant"] == "acme"
    status, _, _ = await http.call("POST", "/v1/schedules/mine:pause", token=ACME)
    assert status == 200


async def test_dead_letters_are_listed_and_redriven_over_http(
    http: Http, sink: RecordingSink
) -> None:
    sink.fail_with(400)  # permanent: dead-lettered on the first attempt
    spec = {**one_shot(sink.url + "/dl", at(timedelta(seconds=0))), "retry": {"maxAttempts": 1}}
    assert (await http.call("POST", "/v1/schedules", {"key": "dl", "spec": spec}))[0] == 200
    await sink.wait_for("/dl", 1, timeout_s=15)
    since = at(timedelta(hours=-1))
    letters: list[dict[str, Any]] = []
    for _ in range(100):
        status, reply, _ = await http.call("GET", f"/v1/deadLetters?range.since={since}")
        assert status == 200, reply
        letters = reply["deadLetters"]
        if letters:
            break
        await asyncio.sleep(0.1)
    [letter] = letters
    assert letter["key"] == "dl"
    sink.heal()
    status, reply, _ = await http.call(
        "POST",
        "/v1/deadLetters:redrive",
        {"firingIds": [letter["firingId"]], "range": {"since": since}},
    )
    assert status == 200 and reply["redriven"] == 1, reply
    await sink.wait_for("/dl", 2, timeout_s=15)


async def test_tenant_administration_needs_the_admin_token(http: Http) -> None:
    status, created, _ = await http.call("POST", "/v1/tenants", {"name": "initech"}, token=ADMIN)
    assert status == 200, created
    token = created["token"]
    status, reply, _ = await http.call(
        "PUT", "/v1/tenants/initech/limits", {"ratePerS": 50, "burst": 100}, token=ADMIN
    )
    assert status == 200, reply
    assert reply["limits"]["ratePerS"] == 50
    status, reply, _ = await http.call("GET", "/v1/schedules", token=token)
    assert status == 200 and reply["schedules"] == []
    status, reply, _ = await http.call("GET", "/v1/tenants/initech", token=token)
    assert status == 403 and reply["error"]["status"] == "PERMISSION_DENIED"


async def test_the_openapi_document_is_served(http: Http) -> None:
    status, document, _ = await http.call("GET", "/v1/openapi.json", token=None)
    assert status == 200
    assert "post" in document["paths"]["/v1/schedules/{key}:pause"]
