"""Trace context end to end, on both stores: a callback carries a `traceparent` that
continues the trace of the call that created its schedule (over gRPC or HTTP), each
attempt with a span of its own; and with an OTLP endpoint, the api call and each
delivery are spans exported to a real OTLP/HTTP receiver, linked parent to child."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import grpc
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from clockwork_svc import app
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import trace_context, triggers
from clockwork_svc.domain.spec import RetryKind, RetryPolicy
from clockwork_svc.settings import ProcessSettings
from tests.integration.test_dev_node import now_ms, spec
from tests.integration.test_schedule_operations import settings  # noqa: F401 (fixture)
from tests.support.sink import RecordingSink

GRPC_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HTTP_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def one_shot(url: str) -> pb.ScheduleSpec:
    message = pb.ScheduleSpec(http=pb.HttpTarget(url=url), payload=b"{}")
    message.once.at.FromMilliseconds(now_ms())
    return message


async def create_over_grpc(node: app.Node, key: str, url: str, parent: str) -> None:
    assert node.api is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.api.port}") as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        await stub.CreateSchedule(
            pb.CreateScheduleRequest(key=key, spec=one_shot(url)),
            metadata=(("clockwork-tenant", "acme"), ("traceparent", parent)),
        )


async def create_over_http(node: app.Node, key: str, url: str, parent: str) -> None:
    assert node.http is not None
    when = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    body = {"key": key, "spec": {"once": {"at": when}, "http": {"url": url}, "payload": ""}}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{node.http.port}/v1/schedules",
            json=body,
            headers={"Clockwork-Tenant": "acme", "traceparent": parent},
        ) as reply,
    ):
        assert reply.status == 200, await reply.text()


def sent(received: object) -> trace_context.TraceParent:
    headers = received.headers  # type: ignore[attr-defined]
    parsed = trace_context.parse(headers["traceparent"])
    assert parsed is not None, headers
    return parsed


@pytest.fixture
async def node(settings: ProcessSettings) -> AsyncIterator[app.Node]:  # noqa: F811
    api = dataclasses.replace(settings.api, http_listen=("127.0.0.1", 0))
    async with app.running(dataclasses.replace(settings, api=api), api=True, worker=True) as n:
        yield n


async def test_a_callback_continues_the_trace_of_the_call_that_created_it(
    node: app.Node, client: ClockworkClient, sink: RecordingSink
) -> None:
    await create_over_grpc(node, "via-grpc", sink.url + "/grpc", GRPC_PARENT)
    await create_over_http(node, "via-http", sink.url + "/http", HTTP_PARENT)
    await client.create("no-parent", spec(sink.url + "/none", triggers.OnceTrigger(now_ms())))
    await create_over_grpc(node, "malformed", sink.url + "/malformed", "00-not-a-context")
    [over_grpc] = await sink.wait_for("/grpc", 1, timeout_s=15)
    [over_http] = await sink.wait_for("/http", 1, timeout_s=15)
    [without] = await sink.wait_for("/none", 1, timeout_s=15)
    for received, parent in ((over_grpc, GRPC_PARENT), (over_http, HTTP_PARENT)):
        context = sent(received)
        expected = trace_context.parse(parent)
        assert expected is not None
        assert context.trace_id == expected.trace_id
        assert context.span_id != expected.span_id
    assert sent(without).trace_id not in (GRPC_PARENT[3:35], HTTP_PARENT[3:35])
    # A malformed caller context is ignored: the schedule keeps none, each delivery
    # starts a trace.
    [malformed] = await sink.wait_for("/malformed", 1, timeout_s=15)
    assert sent(malformed).trace_id not in (GRPC_PARENT[3:35], HTTP_PARENT[3:35])
    stored = await node.store.get_schedule("acme", "malformed")
    assert stored is not None and stored.trace_parent == ""
    # (a well-formed one is kept, as the caller sent it)
    kept = await node.store.get_schedule("acme", "via-grpc")
    assert kept is not None and kept.trace_parent == GRPC_PARENT


async def test_each_attempt_sends_a_span_of_its_own_in_the_same_trace(
    node: app.Node, client: ClockworkClient, sink: RecordingSink
) -> None:
    # The spec retries by default (exponential from 1 s). The first attempt fails.
    sink.fail_with(503)
    await create_over_grpc(node, "retried", sink.url + "/retried", GRPC_PARENT)
    [first] = await sink.wait_for("/retried", 1, timeout_s=15)
    sink.heal()
    first_context = sent(first)
    received = await sink.wait_for("/retried", 2, timeout_s=15)
    second_context = sent(received[1])
    assert first_context.trace_id == second_context.trace_id == GRPC_PARENT[3:35]
    assert first_context.span_id != second_context.span_id


# --- OTLP export -------------------------------------------------------------------------


class OtlpReceiver:
    """An OTLP/HTTP trace receiver: decodes each export request's spans."""

    def __init__(self) -> None:
        self.spans: list[trace_pb2.Span] = []
        self.services: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> OtlpReceiver:
        application = web.Application()
        application.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(application, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        body = await request.read()
        exported = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in exported.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    self.services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        reply = trace_service_pb2.ExportTraceServiceResponse()
        return web.Response(body=reply.SerializeToString(), content_type="application/x-protobuf")


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    receiver = await OtlpReceiver().start()
    yield receiver
    await receiver.stop()


async def test_api_calls_and_deliveries_are_spans_exported_over_otlp(
    settings: ProcessSettings,  # noqa: F811
    otlp: OtlpReceiver,
    sink: RecordingSink,
) -> None:
    ops = dataclasses.replace(settings.ops, otlp_endpoint=otlp.url)
    traced = dataclasses.replace(settings, ops=ops)
    retry = RetryPolicy(RetryKind.FIXED, max_attempts=2, initial_delay_ms=200)
    async with app.running(traced, api=True, worker=True) as running:
        await create_over_grpc(running, "traced", sink.url + "/traced", GRPC_PARENT)
        [callback] = await sink.wait_for("/traced", 1, timeout_s=15)
        assert running.api is not None
        settings_acme = ClientSettings(f"127.0.0.1:{running.api.port}", tenant="acme")
        async with ClockworkClient(settings_acme) as client:
            sink.fail_with(500)
            await client.create(
                "failing",
                spec(sink.url + "/failing", triggers.OnceTrigger(now_ms()), retry=retry),
            )
            await sink.wait_for("/failing", 2, timeout_s=15)
        await asyncio.sleep(0.5)  # the execution is recorded after the callback
    # Leaving `running` flushed the spans still batched.
    assert otlp.services == {"clockwork-api+worker"}
    by_name: dict[str, list[trace_pb2.Span]] = {}
    for span in otlp.spans:
        by_name.setdefault(span.name, []).append(span)
    [create] = [
        s
        for s in by_name["clockwork.api.v1.SchedulerService/CreateSchedule"]
        if s.trace_id.hex() == GRPC_PARENT[3:35]
    ]
    assert create.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert create.parent_span_id.hex() == GRPC_PARENT[36:52]
    deliveries = [s for s in by_name["clockwork.deliver"] if s.trace_id == create.trace_id]
    [delivery] = deliveries
    assert delivery.kind == trace_pb2.Span.SPAN_KIND_CLIENT
    assert delivery.parent_span_id == create.span_id
    attributes = {a.key: a.value for a in delivery.attributes}
    assert attributes["clockwork.schedule"].string_value == "traced"
    assert attributes["http.response.status_code"].int_value == 200
    # The callback's traceparent is the delivery span's own context.
    assert sent(callback).span_id == delivery.span_id.hex()
    # The failing schedule's two attempts: two spans of one trace, marked failed.
    failing = [
        s
        for s in by_name["clockwork.deliver"]
        if any(
            a.key == "clockwork.schedule" and a.value.string_value == "failing"
            for a in s.attributes
        )
    ]
    assert len(failing) == 2 and len({s.trace_id for s in failing}) == 1
    assert all(s.status.code == trace_pb2.Status.STATUS_CODE_ERROR for s in failing)
