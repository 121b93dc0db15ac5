"""Typed async client for the Clockwork v1 API (used by the CLI, the operator and tests).

It speaks the domain: it takes specs, limits and defaults as domain objects and answers
with domain objects (`Schedule`, `Execution`, `ClusterLoad`, ...) or, where the domain
has none, the API's own small types (clockwork_svc/api/v1/model.py: pages, tenants and
dead letters as the API shows them). A failed call raises the `ClockworkError` subclass
for its status (`NotFound`, `AlreadyExists`, `InvalidArgument` with the field, ...;
the table is clockwork_svc/api/status.py), with the status code in `.status` and the
`grpc.aio.AioRpcError` as `__cause__`.

Every v1 call is idempotent, so the channel retries UNAVAILABLE automatically with
backoff (gRPC service-config retries); a call the server refuses for overload (with
a `grpc-retry-pushback-ms` hint) is retried past gRPC's five attempts, after the
hinted wait, until the call's timeout.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import grpc

from clockwork_svc.api import DEFAULT_ADDRESS
from clockwork_svc.api.status import error_from_rpc
from clockwork_svc.api.v1 import (
    cluster_pb2,
    cluster_pb2_grpc,
    convert,
    tenants_pb2,
    tenants_pb2_grpc,
)
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
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
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision
from clockwork_svc.domain.model import (
    Backfilled,
    BulkAction,
    BulkResult,
    Created,
    Execution,
    RedriveResult,
    Schedule,
    ScheduleDetail,
    ScheduleQuery,
    Triggered,
)
from clockwork_svc.domain.spec import ScheduleSpec
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.errors import ClockworkError
from clockwork_svc.server.admission import PUSHBACK_METADATA
from clockwork_svc.server.auth import TENANT_METADATA

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "clockwork.api.v1.SchedulerService"},
                    {"service": "clockwork.api.v1.TenantService"},
                ],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.2s",
                    "maxBackoff": "3s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


def refusal_hint_ms(exc: grpc.aio.AioRpcError) -> int | None:
    """The server's retry hint (ms) when it refused the call for overload (UNAVAILABLE
    with `grpc-retry-pushback-ms`), or None for any other failure."""
    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
        return None
    for key, value in exc.trailing_metadata() or ():
        if key == PUSHBACK_METADATA and isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def retry_wait_s(exc: grpc.aio.AioRpcError, jitter: float) -> float | None:
    """How long to wait before retrying a call the server refused for overload (its
    hint, spread by `jitter`, 0 to 1), or None: any other failure is not retried here
    (gRPC's retry policy has had its go at UNAVAILABLE)."""
    hint = refusal_hint_ms(exc)
    return None if hint is None else hint / 1000 * (0.8 + 0.4 * jitter)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    server: str = DEFAULT_ADDRESS
    tenant: str | None = None
    token: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    timeout_s: float = 30.0


class ClockworkClient:
    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        options = [
            ("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.enable_retries", 1),
            # A connection of its own, not one shared with every channel of the process
            # to the same server: the server limits the calls open per connection.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if settings.ca_file or settings.cert_file:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=settings.ca_file.read_bytes() if settings.ca_file else None,
                private_key=settings.key_file.read_bytes() if settings.key_file else None,
                certificate_chain=settings.cert_file.read_bytes() if settings.cert_file else None,
            )
            self._channel = grpc.aio.secure_channel(settings.server, credentials, options)
        else:
            self._channel = grpc.aio.insecure_channel(settings.server, options)
        self._stub = pb_grpc.SchedulerServiceStub(self._channel)
        self._tenants = tenants_pb2_grpc.TenantServiceStub(self._channel)
        self._cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)
        metadata = []
        if settings.tenant:
            metadata.append((TENANT_METADATA, settings.tenant))
        if settings.token:
            metadata.append(("authorization", f"Bearer {settings.token}"))
        self._metadata = tuple(metadata)

    async def __aenter__(self) -> ClockworkClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _unary(
        self, method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp], request: Req
    ) -> Resp:
        """One call, retried while the server refuses it for overload, until
        `timeout_s` has passed: gRPC's own retries stop after five attempts, which a
        burst against a busy server outlasts."""
        deadline = time.monotonic() + self._settings.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return await method(request, metadata=self._metadata, timeout=max(remaining, 0))
            except grpc.aio.AioRpcError as exc:
                wait_s = retry_wait_s(exc, random.random())
                if wait_s is None or wait_s >= deadline - time.monotonic():
                    raise error_from_rpc(exc) from exc
            await asyncio.sleep(wait_s)

    async def create(
        self,
        key: str,
        spec: ScheduleSpec | pb.ScheduleSpec,
        labels: Mapping[str, str] | None = None,
    ) -> Created:
        """Create the schedule, or find it created already with the same spec and
        labels (a different spec or labels raises `AlreadyExists`). A spec already
        encoded as a message is sent as it is."""
        request = pb.CreateScheduleRequest(key=key, spec=_spec(spec), labels=labels or {})
        return convert.created_from_pb(await self._unary(self._stub.CreateSchedule, request))

    async def create_many(
        self,
        entries: Sequence[
            tuple[str, ScheduleSpec | pb.ScheduleSpec]
            | tuple[str, ScheduleSpec | pb.ScheduleSpec, Mapping[str, str]]
        ],
    ) -> list[Created | ClockworkError]:
        """Create each (key, spec) or (key, spec, labels); answers each entry, in
        order, with `Created` or the error it met (returned, not raised: the other
        entries went through)."""
        request = pb.BatchCreateSchedulesRequest(
            requests=[
                pb.CreateScheduleRequest(
                    key=e[0], spec=_spec(e[1]), labels=e[2] if len(e) == 3 else {}
                )
                for e in entries
            ]
        )
        return convert.batch_from_pb(await self._unary(self._stub.BatchCreateSchedules, request))

    async def get(self, key: str) -> Schedule:
        request = pb.GetScheduleRequest(key=key, upcoming_count=0, execution_count=0)
        return convert.schedule_from_pb(await self._unary(self._stub.GetSchedule, request))

    async def describe(self, key: str, upcoming: int = 10, executions: int = 10) -> ScheduleDetail:
        """The schedule with its next `upcoming` occurrence times and its latest
        `executions` (each 0-100)."""
        request = pb.GetScheduleRequest(
            key=key, upcoming_count=upcoming, execution_count=executions
        )
        return convert.detail_from_pb(await self._unary(self._stub.GetSchedule, request))

    async def preview(
        self, trigger: triggers.Trigger, count: int = 10, from_ms: int | None = None
    ) -> list[int]:
        """The occurrence times a schedule with this trigger would have if created at
        `from_ms` (default: now on the server), without creating it."""
        request = pb.PreviewScheduleRequest(count=count)
        convert.trigger_to_pb(trigger, request)
        if from_ms is not None:
            getattr(request, "from").CopyFrom(convert.ms_to_ts(from_ms))
        return convert.preview_from_pb(await self._unary(self._stub.PreviewSchedule, request))

    async def trigger(
        self, key: str, payload: bytes | None = None, request_id: str = ""
    ) -> Triggered:
        """Run one occurrence now, outside the timetable, with `payload` instead of the
        schedule's if given. With a `request_id`, repeating the call fires nothing more."""
        request = pb.TriggerScheduleRequest(key=key, request_id=request_id)
        if payload is not None:
            request.payload = payload
        return convert.triggered_from_pb(await self._unary(self._stub.TriggerSchedule, request))

    async def backfill(self, key: str, start_ms: int, end_ms: int) -> Backfilled:
        """Fire the occurrences the schedule had in [start, end) now, in order, each
        with the delivery id it had (at most 1000 per call)."""
        request = pb.BackfillScheduleRequest(
            key=key, start=convert.ms_to_ts(start_ms), end=convert.ms_to_ts(end_ms)
        )
        return convert.backfilled_from_pb(await self._unary(self._stub.BackfillSchedule, request))

    async def list(
        self, page_size: int = 100, page_token: str = "", query: ScheduleQuery | None = None
    ) -> Page[Schedule]:
        """A page of the tenant's schedules by key, of those `query` keeps if given (a
        filtered page may be short, even empty, and still have a next page)."""
        request = pb.ListSchedulesRequest(page_size=page_size, page_token=page_token)
        if query is not None:
            convert.query_to_pb(query, request)
        return convert.schedule_page_from_pb(await self._unary(self._stub.ListSchedules, request))

    async def bulk(
        self,
        action: BulkAction,
        query: ScheduleQuery,
        *,
        note: str = "",
        request_id: str = "",
        dry_run: bool = False,
        page_size: int = 1000,
    ) -> BulkResult:
        """Apply `action` to every schedule `query` matches, a page (call) at a time,
        and sum what each call did; `first_keys` and `failures` are the first of all."""
        total = BulkResult(0, 0, 0, 0)
        token = ""
        while True:
            request = pb.BulkScheduleActionRequest(
                action=convert.bulk_action_to_pb(action),
                note=note,
                request_id=request_id,
                dry_run=dry_run,
                page_size=page_size,
                page_token=token,
            )
            convert.query_to_pb(query, request)
            reply = await self._unary(self._stub.BulkScheduleAction, request)
            page, token = convert.bulk_result_from_pb(reply)
            total = BulkResult(
                total.matched + page.matched,
                total.applied + page.applied,
                total.skipped + page.skipped,
                total.failed + page.failed,
                (total.first_keys + page.first_keys)[:20],
                (total.failures + page.failures)[:100],
            )
            if not token:
                return total

    async def set_labels(self, key: str, labels: Mapping[str, str]) -> Schedule:
        """Replace the schedule's labels (those left out are removed)."""
        request = pb.SetScheduleLabelsRequest(key=key, labels=labels)
        return convert.schedule_from_pb(await self._unary(self._stub.SetScheduleLabels, request))

    async def list_all(
        self, page_size: int = 500, query: ScheduleQuery | None = None
    ) -> AsyncIterator[Schedule]:
        token = ""
        while True:
            page = await self.list(page_size, token, query)
            for schedule in page.items:
                yield schedule
            token = page.next_page_token
            if not token:
                return

    async def update(
        self, key: str, spec: ScheduleSpec | pb.ScheduleSpec, expected_version: int = 0
    ) -> Schedule:
        request = pb.UpdateScheduleRequest(
            key=key, spec=_spec(spec), expected_version=expected_version
        )
        return convert.schedule_from_pb(await self._unary(self._stub.UpdateSchedule, request))

    async def pause(self, key: str, note: str = "") -> Schedule:
        """Pause, keeping `note` (who and why) with the schedule until it is resumed."""
        request = pb.PauseScheduleRequest(key=key, note=note)
        return convert.schedule_from_pb(await self._unary(self._stub.PauseSchedule, request))

    async def resume(self, key: str) -> Schedule:
        request = pb.ResumeScheduleRequest(key=key)
        return convert.schedule_from_pb(await self._unary(self._stub.ResumeSchedule, request))

    async def cancel(self, key: str) -> Schedule:
        request = pb.CancelScheduleRequest(key=key)
        return convert.schedule_from_pb(await self._unary(self._stub.CancelSchedule, request))

    async def executions(
        self, key: str, page_size: int = 100, page_token: str = ""
    ) -> Page[Execution]:
        """Delivery attempts of schedule `key`, newest first. The message names no
        tenant: each execution's `tenant` is this client's tenant setting ("" when the
        token decides it)."""
        request = pb.ListExecutionsRequest(key=key, page_size=page_size, page_token=page_token)
        reply = await self._unary(self._stub.ListExecutions, request)
        return convert.execution_page_from_pb(reply, self._settings.tenant or "", key)

    async def dead_letters(
        self,
        window: DeadLetterRange | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[DeadLetterInfo]:
        request = pb.ListDeadLettersRequest(
            range=_range(window), page_size=page_size, page_token=page_token
        )
        return convert.dead_letter_page_from_pb(
            await self._unary(self._stub.ListDeadLetters, request)
        )

    async def redrive(
        self,
        window: DeadLetterRange | None = None,
        firing_ids: Sequence[str] = (),
        again: bool = False,
    ) -> RedriveResult:
        request = pb.RedriveDeadLettersRequest(
            range=_range(window), firing_ids=list(firing_ids), again=again
        )
        return convert.redrive_from_pb(await self._unary(self._stub.RedriveDeadLetters, request))

    # --- tenant administration (admin credential) -----------------------------------

    async def create_tenant(self, name: str) -> TenantCreated:
        request = tenants_pb2.CreateTenantRequest(name=name)
        return convert.tenant_created_from_pb(
            await self._unary(self._tenants.CreateTenant, request)
        )

    async def get_tenant(self, name: str) -> TenantInfo:
        request = tenants_pb2.GetTenantRequest(name=name)
        return convert.tenant_from_pb(await self._unary(self._tenants.GetTenant, request))

    async def list_tenants(self, page_size: int = 100, page_token: str = "") -> Page[TenantInfo]:
        request = tenants_pb2.ListTenantsRequest(page_size=page_size, page_token=page_token)
        return convert.tenant_page_from_pb(await self._unary(self._tenants.ListTenants, request))

    async def rotate_signing_secret(
        self, name: str, retire_previous: bool = False
    ) -> SecretRotated:
        request = tenants_pb2.RotateSigningSecretRequest(name=name, retire_previous=retire_previous)
        return convert.secret_rotated_from_pb(
            await self._unary(self._tenants.RotateSigningSecret, request)
        )

    async def issue_token(self, name: str) -> TokenIssued:
        request = tenants_pb2.IssueTokenRequest(name=name)
        return convert.token_issued_from_pb(await self._unary(self._tenants.IssueToken, request))

    async def revoke_tokens(self, name: str) -> TenantInfo:
        request = tenants_pb2.RevokeTokensRequest(name=name)
        return convert.tenant_from_pb(await self._unary(self._tenants.RevokeTokens, request))

    async def set_tenant_limits(self, name: str, limits: TenantLimits) -> TenantInfo:
        """Set the delivery limits (`limits.paused` is ignored: see `pause_tenant`)."""
        request = tenants_pb2.SetTenantLimitsRequest(name=name, limits=convert.limits_to_pb(limits))
        return convert.tenant_from_pb(await self._unary(self._tenants.SetTenantLimits, request))

    async def pause_tenant(self, name: str) -> TenantInfo:
        request = tenants_pb2.PauseTenantRequest(name=name)
        return convert.tenant_from_pb(await self._unary(self._tenants.PauseTenant, request))

    async def resume_tenant(self, name: str) -> TenantInfo:
        request = tenants_pb2.ResumeTenantRequest(name=name)
        return convert.tenant_from_pb(await self._unary(self._tenants.ResumeTenant, request))

    async def set_tenant_defaults(self, name: str, defaults: TenantDefaults) -> TenantInfo:
        request = tenants_pb2.SetTenantDefaultsRequest(
            name=name, defaults=convert.defaults_to_pb(defaults)
        )
        return convert.tenant_from_pb(await self._unary(self._tenants.SetTenantDefaults, request))

    # --- cluster introspection (admin credential) --------------------------------------

    async def cluster_load(self) -> ClusterLoad:
        request = cluster_pb2.GetClusterLoadRequest()
        return convert.cluster_load_from_pb(
            await self._unary(self._cluster.GetClusterLoad, request)
        )

    async def record_scale_decision(self, decision: ScaleDecision) -> ScaleDecision:
        request = convert.scale_decision_to_pb(decision)
        return convert.scale_decision_from_pb(
            await self._unary(self._cluster.RecordScaleDecision, request)
        )


def _spec(spec: ScheduleSpec | pb.ScheduleSpec) -> pb.ScheduleSpec:
    return spec if isinstance(spec, pb.ScheduleSpec) else convert.spec_to_pb(spec)


def _range(window: DeadLetterRange | None) -> pb.DeadLetterRange | None:
    return None if window is None else convert.range_to_pb(window)
