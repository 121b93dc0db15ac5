"""The v1 SchedulerService: maps requests onto `Scheduling` and errors onto status codes.

This is the only place domain errors become gRPC status codes (through the table in
clockwork_svc/api/status.py).
"""

from __future__ import annotations

import base64
import functools
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc

from clockwork_svc.api.status import status_of
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.api.v1.model import Page
from clockwork_svc.dead_letters import DeadLetters, Range
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Created, NewSchedule, ScheduleQuery
from clockwork_svc.domain.spec import validate_key
from clockwork_svc.errors import ClockworkError, InvalidArgument
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.scheduling import DEFAULT_LISTED, MAX_BATCH, MAX_BULK_PER_CALL, Scheduling
from clockwork_svc.server.auth import Principal, current_principal
from clockwork_svc.server.call_tracing import current_trace_parent

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

MAX_PAGE = 1000
DEFAULT_PAGE = 100


class _Servicer(Protocol):
    _metrics: Metrics


S = TypeVar("S", bound=_Servicer)
A = TypeVar("A")


def rpc_method(
    authorize: Callable[[Principal], A],
) -> Callable[
    [Callable[[S, Req, A], Awaitable[Resp]]],
    Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
]:
    """Wraps a servicer method: authorizes the caller's principal (passing what
    `authorize` returns, e.g. the tenant), maps Clockwork errors to status codes, and
    counts the request by method and code."""

    def decorate(
        fn: Callable[[S, Req, A], Awaitable[Resp]],
    ) -> Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
        @functools.wraps(fn)
        async def wrapper(
            self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Resp:
            code = grpc.StatusCode.OK
            try:
                return await fn(self, request, authorize(current_principal.get()))
            except ClockworkError as exc:
                code = status_of(exc)
                if code is grpc.StatusCode.UNAVAILABLE:
                    log.warning("%s: %s", fn.__name__, exc)
                await context.abort(code, str(exc))
                raise  # unreachable: abort raises
            finally:
                self._metrics.api_requests.labels(fn.__name__, code.name).inc()

        return wrapper

    return decorate


def tenant_of(principal: Principal) -> str:
    if principal.tenant is None:
        raise InvalidArgument("tenant", "an admin must name the tenant (clockwork-tenant metadata)")
    return principal.tenant


_rpc = rpc_method(tenant_of)


def page_size(value: int) -> int:
    if value > MAX_PAGE:
        raise InvalidArgument("page_size", f"at most {MAX_PAGE}")
    return value or DEFAULT_PAGE


def encode_token(*parts: str | int) -> str:
    return base64.urlsafe_b64encode("\x1f".join(map(str, parts)).encode()).decode()


def decode_token(token: str, count: int) -> list[str]:
    try:
        parts = base64.urlsafe_b64decode(token.encode()).decode().split("\x1f")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument("page_token", "is malformed") from exc
    if len(parts) != count:
        raise InvalidArgument("page_token", "is malformed")
    return parts


_TOKEN_NUMBER = re.compile(r"[0-9]{1,19}")
_MAX_INT64 = 2**63 - 1


def token_number(text: str) -> int:
    """A time in a page token: ASCII digits within int64, the range the stores take
    (`str.isdigit` also admits digits `int` rejects, such as superscripts)."""
    if not _TOKEN_NUMBER.fullmatch(text) or int(text) > _MAX_INT64:
        raise InvalidArgument("page_token", "is malformed")
    return int(text)


class SchedulerServicer(pb_grpc.SchedulerServiceServicer):
    def __init__(self, scheduling: Scheduling, dead_letters: DeadLetters, metrics: Metrics) -> None:
        self._scheduling = scheduling
        self._dead_letters = dead_letters
        self._metrics = metrics

    @_rpc
    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, tenant: str
    ) -> pb.CreateScheduleResponse:
        spec = convert.spec_from_pb(request.spec)
        labels = convert.labels_from_pb(request.labels, "labels")
        trace_parent = current_trace_parent.get()
        return convert.created_to_pb(
            await self._scheduling.create(tenant, request.key, spec, labels, trace_parent)
        )

    @_rpc
    async def BatchCreateSchedules(
        self, request: pb.BatchCreateSchedulesRequest, tenant: str
    ) -> pb.BatchCreateSchedulesResponse:
        if len(request.requests) > MAX_BATCH:
            raise InvalidArgument("requests", f"at most {MAX_BATCH} per batch")
        outcomes: list[Created | ClockworkError | None] = [None] * len(request.requests)
        valid: list[tuple[int, NewSchedule]] = []
        for i, entry in enumerate(request.requests):
            try:
                spec = convert.spec_from_pb(entry.spec, f"requests[{i}].spec")
                labels = convert.labels_from_pb(entry.labels, f"requests[{i}].labels")
            except InvalidArgument as exc:
                outcomes[i] = exc
                continue
            valid.append((i, NewSchedule(entry.key, spec, labels, current_trace_parent.get())))
        created = await self._scheduling.create_many(tenant, [r for _, r in valid])
        for (i, _), outcome in zip(valid, created, strict=True):
            outcomes[i] = outcome
        return convert.batch_to_pb([o for o in outcomes if o is not None])

    @_rpc
    async def GetSchedule(self, request: pb.GetScheduleRequest, tenant: str) -> pb.Schedule:
        upcoming = request.upcoming_count if request.HasField("upcoming_count") else None
        executions = request.execution_count if request.HasField("execution_count") else None
        detail = await self._scheduling.describe(
            tenant,
            request.key,
            DEFAULT_LISTED if upcoming is None else upcoming,
            DEFAULT_LISTED if executions is None else executions,
        )
        return convert.detail_to_pb(detail)

    @_rpc
    async def PreviewSchedule(
        self, request: pb.PreviewScheduleRequest, tenant: str
    ) -> pb.PreviewScheduleResponse:
        trigger = convert.trigger_from_pb(request, "")
        start = None
        if request.HasField("from"):
            # `from` is a Python keyword: the field is only reachable by name.
            start = convert.ts_to_ms(getattr(request, "from"), "from")
        times = self._scheduling.preview(trigger, start, request.count or DEFAULT_LISTED)
        return convert.preview_to_pb(times, triggers.describe(trigger))

    @_rpc
    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, tenant: str
    ) -> pb.ListSchedulesResponse:
        limit = page_size(request.page_size)
        after = decode_token(request.page_token, 1)[0] if request.page_token else None
        query = convert.query_from_pb(request)
        if query is not None:
            found = await self._scheduling.search(tenant, query, after, limit)
            token = encode_token(found.next_after) if found.next_after is not None else ""
            return convert.schedule_page_to_pb(Page(found.schedules, token))
        schedules = await self._scheduling.list_schedules(tenant, after, limit)
        token = encode_token(schedules[-1].key) if len(schedules) == limit else ""
        return convert.schedule_page_to_pb(Page(tuple(schedules), token))

    @_rpc
    async def BulkScheduleAction(
        self, request: pb.BulkScheduleActionRequest, tenant: str
    ) -> pb.BulkScheduleActionResponse:
        action = convert.bulk_action_from_pb(request.action)
        query = convert.query_from_pb(request) or ScheduleQuery()
        if request.page_size > MAX_BULK_PER_CALL:
            raise InvalidArgument("page_size", f"at most {MAX_BULK_PER_CALL}")
        after = decode_token(request.page_token, 1)[0] if request.page_token else None
        result = await self._scheduling.bulk(
            tenant,
            action,
            query,
            note=request.note,
            request_id=request.request_id,
            dry_run=request.dry_run,
            after_key=after,
            limit=request.page_size or MAX_BULK_PER_CALL,
        )
        token = encode_token(result.next_after) if result.next_after is not None else ""
        return convert.bulk_result_to_pb(result, token)

    @_rpc
    async def SetScheduleLabels(
        self, request: pb.SetScheduleLabelsRequest, tenant: str
    ) -> pb.Schedule:
        labels = convert.labels_from_pb(request.labels, "labels")
        return convert.schedule_to_pb(
            await self._scheduling.set_labels(tenant, request.key, labels)
        )

    @_rpc
    async def UpdateSchedule(self, request: pb.UpdateScheduleRequest, tenant: str) -> pb.Schedule:
        spec = convert.spec_from_pb(request.spec)
        return convert.schedule_to_pb(
            await self._scheduling.update(tenant, request.key, spec, request.expected_version)
        )

    @_rpc
    async def PauseSchedule(self, request: pb.PauseScheduleRequest, tenant: str) -> pb.Schedule:
        return convert.schedule_to_pb(
            await self._scheduling.pause(tenant, request.key, request.note)
        )

    @_rpc
    async def ResumeSchedule(self, request: pb.ResumeScheduleRequest, tenant: str) -> pb.Schedule:
        return convert.schedule_to_pb(await self._scheduling.resume(tenant, request.key))

    @_rpc
    async def CancelSchedule(self, request: pb.CancelScheduleRequest, tenant: str) -> pb.Schedule:
        return convert.schedule_to_pb(await self._scheduling.cancel(tenant, request.key))

    @_rpc
    async def TriggerSchedule(
        self, request: pb.TriggerScheduleRequest, tenant: str
    ) -> pb.TriggerScheduleResponse:
        payload = request.payload if request.HasField("payload") else None
        triggered = await self._scheduling.trigger(tenant, request.key, payload, request.request_id)
        return convert.triggered_to_pb(triggered)

    @_rpc
    async def BackfillSchedule(
        self, request: pb.BackfillScheduleRequest, tenant: str
    ) -> pb.BackfillScheduleResponse:
        start, end = convert.backfill_range_from_pb(request)
        return convert.backfilled_to_pb(
            await self._scheduling.backfill(tenant, request.key, start, end)
        )

    @_rpc
    async def ListExecutions(
        self, request: pb.ListExecutionsRequest, tenant: str
    ) -> pb.ListExecutionsResponse:
        limit = page_size(request.page_size)
        before = None
        if request.page_token:
            started, firing = decode_token(request.page_token, 2)
            before = (token_number(started), firing)
        executions = await self._scheduling.executions(tenant, request.key, before, limit)
        token = ""
        if len(executions) == limit:
            token = encode_token(executions[-1].started_ms, executions[-1].firing_id)
        return convert.execution_page_to_pb(Page(tuple(executions), token))

    def _range(self, window: pb.DeadLetterRange) -> Range:
        asked = convert.range_from_pb(window)
        if asked.key:
            validate_key(asked.key, "range.key")
        return self._dead_letters.range(asked.since_ms, asked.until_ms, asked.key)

    @_rpc
    async def ListDeadLetters(
        self, request: pb.ListDeadLettersRequest, tenant: str
    ) -> pb.ListDeadLettersResponse:
        limit = page_size(request.page_size)
        window = self._range(request.range)
        after = None
        if request.page_token:
            dead, firing = decode_token(request.page_token, 2)
            after = (token_number(dead), firing)
        letters = await self._dead_letters.list(tenant, window, after, limit)
        token = encode_token(*letters[-1].sort_key) if len(letters) == limit else ""
        return convert.dead_letter_page_to_pb(Page(tuple(letters), token))

    @_rpc
    async def RedriveDeadLetters(
        self, request: pb.RedriveDeadLettersRequest, tenant: str
    ) -> pb.RedriveDeadLettersResponse:
        if len(request.firing_ids) > 1000:
            raise InvalidArgument("firing_ids", "at most 1000")
        result = await self._dead_letters.redrive(
            tenant, self._range(request.range), list(request.firing_ids), request.again
        )
        return convert.redrive_to_pb(result)
