"""The v1 TenantService: tenant administration for admin callers."""

from __future__ import annotations

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import tenants_pb2 as pb
from clockwork_svc.api.v1 import tenants_pb2_grpc as pb_grpc
from clockwork_svc.api.v1.convert import ms_to_ts
from clockwork_svc.domain.spec import validate_tenant
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits
from clockwork_svc.errors import PermissionDenied
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.server.auth import Principal
from clockwork_svc.server.servicer import decode_token, encode_token, page_size, rpc_method
from clockwork_svc.tenancy import TenantAdmin


def require_admin(principal: Principal) -> None:
    if not principal.admin:
        raise PermissionDenied("tenant administration needs the admin credential")


_admin = rpc_method(require_admin)


def tenant_name(name: str) -> str:
    """The request's `name`, checked here so an error names that field (the store layer
    calls it "tenant", which in this API is the caller's own tenant)."""
    validate_tenant(name, "name")
    return name


def tenant_to_pb(t: Tenant) -> pb.Tenant:
    limits = pb.TenantLimits(
        rate_per_s=t.limits.rate_per_s,
        burst=t.limits.burst,
        max_concurrency=t.limits.max_concurrency,
        drain_rate_per_s=t.limits.drain_rate_per_s,
    )
    defaults = pb.TenantDefaults(retry=convert.retry_to_pb(t.defaults.retry))
    if t.defaults.relevancy_window_ms:
        defaults.relevancy_window.CopyFrom(convert.ms_to_dur(t.defaults.relevancy_window_ms))
    return pb.Tenant(
        defaults=defaults,
        limits=limits,
        paused=t.limits.paused,
        name=t.name,
        create_time=ms_to_ts(t.created_ms),
        update_time=ms_to_ts(t.updated_ms),
        version=t.version,
        signing_secret_count=len(t.signing_secrets),
        token_count=len(t.token_hashes),
    )


class TenantServicer(pb_grpc.TenantServiceServicer):
    def __init__(self, admin: TenantAdmin, metrics: Metrics) -> None:
        self._admin = admin
        self._metrics = metrics

    @_admin
    async def CreateTenant(
        self, request: pb.CreateTenantRequest, _: None
    ) -> pb.CreateTenantResponse:
        tenant, token, secret = await self._admin.create(tenant_name(request.name))
        return pb.CreateTenantResponse(
            tenant=tenant_to_pb(tenant), token=token, signing_secret=secret
        )

    @_admin
    async def GetTenant(self, request: pb.GetTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.get(tenant_name(request.name)))

    @_admin
    async def ListTenants(self, request: pb.ListTenantsRequest, _: None) -> pb.ListTenantsResponse:
        limit = page_size(request.page_size)
        after = decode_token(request.page_token, 1)[0] if request.page_token else None
        tenants = await self._admin.list(after, limit)
        token = encode_token(tenants[-1].name) if len(tenants) == limit else ""
        return pb.ListTenantsResponse(
            tenants=[tenant_to_pb(t) for t in tenants], next_page_token=token
        )

    @_admin
    async def RotateSigningSecret(
        self, request: pb.RotateSigningSecretRequest, _: None
    ) -> pb.RotateSigningSecretResponse:
        issued = await self._admin.rotate_secret(tenant_name(request.name), request.retire_previous)
        return pb.RotateSigningSecretResponse(
            tenant=tenant_to_pb(issued.tenant), signing_secret=issued.secret
        )

    @_admin
    async def IssueToken(self, request: pb.IssueTokenRequest, _: None) -> pb.IssueTokenResponse:
        issued = await self._admin.issue_token(tenant_name(request.name))
        return pb.IssueTokenResponse(tenant=tenant_to_pb(issued.tenant), token=issued.secret)

    @_admin
    async def RevokeTokens(self, request: pb.RevokeTokensRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.revoke_tokens(tenant_name(request.name)))

    @_admin
    async def SetTenantLimits(self, request: pb.SetTenantLimitsRequest, _: None) -> pb.Tenant:
        given = request.limits
        limits = TenantLimits(
            rate_per_s=given.rate_per_s,
            burst=given.burst,
            max_concurrency=given.max_concurrency,
            drain_rate_per_s=given.drain_rate_per_s,
        )
        return tenant_to_pb(await self._admin.set_limits(tenant_name(request.name), limits))

    @_admin
    async def PauseTenant(self, request: pb.PauseTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.set_paused(tenant_name(request.name), True))

    @_admin
    async def ResumeTenant(self, request: pb.ResumeTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.set_paused(tenant_name(request.name), False))

    @_admin
    async def SetTenantDefaults(self, request: pb.SetTenantDefaultsRequest, _: None) -> pb.Tenant:
        given = request.defaults
        defaults = TenantDefaults(
            retry=convert.retry_from_pb(given.retry, "defaults.retry"),
            relevancy_window_ms=convert.dur_to_ms(
                given.relevancy_window, "defaults.relevancy_window"
            ),
        )
        return tenant_to_pb(await self._admin.set_defaults(tenant_name(request.name), defaults))
