"""The HTTP gateway over the real call pipeline (admission, authentication,
decoding), with servicer stand-ins that block or fail: a refusal at the in-flight
limit is a 503 with Retry-After, and a fault of a handler a 500 that says nothing of
its cause."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from clockwork_svc.api import http_rules, openapi
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.server.admission import Admission
from clockwork_svc.server.auth import Authenticator, AuthSettings
from clockwork_svc.server.call_pipeline import CallPipeline
from clockwork_svc.server.grpc_server import SERVICES
from clockwork_svc.server.http_gateway import HttpGateway
from clockwork_svc.server.interception import Handler
from clockwork_svc.server.local_calls import LocalCalls

GET = "/clockwork.api.v1.SchedulerService/GetSchedule"
CANCEL = "/clockwork.api.v1.SchedulerService/CancelSchedule"


class Servicer:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def get(self, request: pb.GetScheduleRequest, context: Any) -> pb.Schedule:
        self.entered.set()
        await self.release.wait()
        return pb.Schedule(key=request.key, version=2)

    async def cancel(self, request: pb.CancelScheduleRequest, context: Any) -> pb.Schedule:
        raise RuntimeError("secret detail of a bug")


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Servicer]]:
    servicer = Servicer()
    handlers: dict[str, Handler] = {
        GET: grpc.unary_unary_rpc_method_handler(
            servicer.get,
            request_deserializer=pb.GetScheduleRequest.FromString,
            response_serializer=pb.Schedule.SerializeToString,
        ),
        CANCEL: grpc.unary_unary_rpc_method_handler(
            servicer.cancel,
            request_deserializer=pb.CancelScheduleRequest.FromString,
            response_serializer=pb.Schedule.SerializeToString,
        ),
    }
    admission = Admission(1, jitter=lambda: 0.5)
    pipeline = CallPipeline(
        admission, lambda: None, Authenticator(AuthSettings(enabled=False)), Tracing()
    )
    calls = LocalCalls(handlers, [pipeline], 1 << 20)
    table = http_rules.routes(SERVICES)
    gateway = HttpGateway(calls, table, openapi.document(table, "v1"), max_body_bytes=1 << 20)
    await gateway.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{gateway.port}", servicer
    finally:
        servicer.release.set()
        await gateway.stop()


async def test_a_call_past_the_in_flight_limit_is_503_with_retry_after(
    served: tuple[str, Servicer],
) -> None:
    url, servicer = served
    async with aiohttp.ClientSession(url) as session:
        first = asyncio.create_task(session.get("/v1/schedules/a"))
        await asyncio.wait_for(servicer.entered.wait(), 5)
        async with session.get("/v1/schedules/b") as refused:
            assert refused.status == 503
            assert int(refused.headers["Retry-After"]) >= 1
            error = (await refused.json())["error"]
            assert error["status"] == "UNAVAILABLE" and "retry after" in error["message"]
        servicer.release.set()
        async with await first as admitted:
            assert admitted.status == 200
            body = await admitted.json()
            assert (body["key"], body["version"]) == ("a", "2")


async def test_a_handler_fault_is_a_500_without_its_details(
    served: tuple[str, Servicer],
) -> None:
    url, _ = served
    async with (
        aiohttp.ClientSession(url) as session,
        session.post("/v1/schedules/a:cancel") as reply,
    ):
        assert reply.status == 500
        error = (await reply.json())["error"]
        assert error == {
            "code": 500,
            "status": "INTERNAL",
            "message": "internal error",
            "field": "",
        }
