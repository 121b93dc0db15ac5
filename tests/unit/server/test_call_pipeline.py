"""The api's call pipeline: its steps in order (admission, authentication, decoding,
trace context) around a servicer stand-in, and each method composed once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import grpc
import pytest

from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.domain.tenant import hash_token
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.server.admission import PUSHBACK_METADATA, Admission
from clockwork_svc.server.auth import Authenticator, AuthSettings, Principal, current_principal
from clockwork_svc.server.call_pipeline import CallPipeline
from clockwork_svc.server.call_tracing import current_trace_parent
from clockwork_svc.server.interception import Handler

GET = "/clockwork.api.v1.SchedulerService/GetSchedule"
HEALTH = "/grpc.health.v1.Health/Check"
TOKEN = "acme-token-0123456789"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNDECODABLE = b"\x0a\x02\xff\xfe"  # field 1, length 2, not UTF-8


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str, trailing: Sequence[Any]) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details, self.trailing = code, details, tuple(trailing)


class Context:
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[Any] = ()
    ) -> NoReturn:
        raise Aborted(code, details, trailing_metadata)


class Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class Service:
    """Handlers of one v1 method and the health check, counting how often the server
    looked them up (the continuation) and what the servicer saw."""

    def __init__(self) -> None:
        self.lookups = 0
        self.seen: list[tuple[str, Principal, str]] = []
        self.handlers: dict[str, Handler] = {
            GET: grpc.unary_unary_rpc_method_handler(
                self.get,
                request_deserializer=pb.GetScheduleRequest.FromString,
                response_serializer=pb.Schedule.SerializeToString,
            ),
            HEALTH: grpc.unary_unary_rpc_method_handler(
                self.health,
                request_deserializer=pb.GetScheduleRequest.FromString,
                response_serializer=pb.Schedule.SerializeToString,
            ),
        }

    async def continuation(self, details: grpc.HandlerCallDetails) -> Handler | None:
        self.lookups += 1
        return self.handlers.get(details.method)

    async def get(self, request: pb.GetScheduleRequest, context: Any) -> pb.Schedule:
        self.seen.append((request.key, current_principal.get(), current_trace_parent.get()))
        return pb.Schedule(key=request.key)

    async def health(self, request: pb.GetScheduleRequest, context: Any) -> pb.Schedule:
        return pb.Schedule(key="healthy")


class Served:
    def __init__(self, limit: int = 4) -> None:
        self.service = Service()
        self.admission = Admission(limit, jitter=lambda: 0.5)
        self.refusals = 0
        settings = AuthSettings(token_hashes={hash_token(TOKEN): "acme"})
        self.pipeline = CallPipeline(
            self.admission, self._refused, Authenticator(settings), Tracing()
        )

    def _refused(self) -> None:
        self.refusals += 1

    async def call(self, method: str, raw: bytes, metadata: Sequence[tuple[str, str]]) -> Any:
        handler = await self.pipeline.intercept_service(self.service.continuation, Details(method))
        assert handler is not None and handler.unary_unary is not None
        context: Any = Context(metadata)  # the part of a servicer context the steps use
        return await handler.unary_unary(raw, context)


AUTHORIZED = (("authorization", f"Bearer {TOKEN}"), ("traceparent", TRACE))


def request(key: str) -> bytes:
    return pb.GetScheduleRequest(key=key).SerializeToString()


async def test_a_call_reaches_the_servicer_with_its_principal_and_trace_parent() -> None:
    served = Served()
    reply = await served.call(GET, request("a"), AUTHORIZED)
    assert reply.key == "a"
    assert served.service.seen == [("a", Principal("acme", admin=False), TRACE)]
    assert served.admission.in_flight == 0


async def test_each_method_is_composed_once_and_kept() -> None:
    served = Served()
    for key in "abc":
        await served.call(GET, request(key), AUTHORIZED)
    await served.call(HEALTH, request("h"), ())
    await served.call(HEALTH, request("h"), ())
    assert served.service.lookups == 2  # one per method, not per call
    assert [key for key, _, _ in served.service.seen] == ["a", "b", "c"]


async def test_an_unknown_method_is_not_kept() -> None:
    served = Served()
    for _ in range(3):
        handler = await served.pipeline.intercept_service(
            served.service.continuation, Details("/clockwork.api.v1.SchedulerService/Nope")
        )
        assert handler is None
    assert served.service.lookups == 3


async def test_a_call_without_a_valid_token_is_refused_before_its_body_is_decoded() -> None:
    served = Served()
    for metadata, problem in (((), "missing bearer token"), (_bearer("x" * 20), "invalid token")):
        with pytest.raises(Aborted) as refused:
            await served.call(GET, UNDECODABLE, metadata)
        assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details == problem
    assert served.service.seen == [] and served.admission.in_flight == 0


async def test_an_undecodable_body_is_invalid_argument() -> None:
    served = Served()
    with pytest.raises(Aborted) as refused:
        await served.call(GET, UNDECODABLE, AUTHORIZED)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details.startswith("request: cannot be decoded: ")
    assert served.service.seen == [] and served.admission.in_flight == 0


async def test_past_the_limit_a_call_is_refused_with_a_hint_and_health_is_still_served() -> None:
    served = Served(limit=1)
    await served.call(GET, request("a"), AUTHORIZED)  # composed while not full
    held = served.admission.try_enter()
    assert held is not None and served.admission.full
    with pytest.raises(Aborted) as refused:
        await served.call(GET, UNDECODABLE, ())  # neither authenticated nor decoded
    assert refused.value.code is grpc.StatusCode.UNAVAILABLE
    assert "retry after" in refused.value.details
    assert [name for name, _ in refused.value.trailing] == [PUSHBACK_METADATA]
    assert served.refusals == 1
    assert (await served.call(HEALTH, request("h"), ())).key == "healthy"
    served.admission.leave(held)
    assert (await served.call(GET, request("b"), AUTHORIZED)).key == "b"


async def test_an_open_method_is_still_decoded() -> None:
    served = Served()
    with pytest.raises(Aborted) as refused:
        await served.call(HEALTH, UNDECODABLE, ())
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)
