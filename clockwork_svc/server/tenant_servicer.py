"""The v1 TenantService: tenant administration for admin callers."""

from __future__ import annotations

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import tenants_pb2 as pb
from clockwork_svc.api.v1 import tenants_pb2_grpc as pb_grpc
from clockwork_svc.api.v1.model import Page, SecretRotated, TenantCreated, TenantInfo, TokenIssued
from clockwork_svc.domain.spec import validate_tenant
from clockwork_svc.domain.tenant import Tenant
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
    return convert.tenant_to_pb(TenantInfo.of(t))


class TenantServicer(pb_grpc.TenantServiceServicer):
    def __init__(self, admin: TenantAdmin, metrics: Metrics) -> None:
        self._admin = admin
        self._metrics = metrics

    @_admin
    async def CreateTenant(
        self, request: pb.CreateTenantRequest, _: None
    ) -> pb.CreateTenantResponse:
        tenant, token, secret = await self._admin.create(tenant_name(request.name))
        return convert.tenant_created_to_pb(TenantCreated(TenantInfo.of(tenant), token, secret))

    @_admin
    async def GetTenant(self, request: pb.GetTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.get(tenant_name(request.name)))

    @_admin
    async def ListTenants(self, request: pb.ListTenantsRequest, _: None) -> pb.ListTenantsResponse:
        limit = page_size(request.page_size)
        after = decode_token(request.page_token, 1)[0] if request.page_token else None
        tenants = await self._admin.list(after, limit)
        token = encode_token(tenants[-1].name) if len(tenants) == limit else ""
        return convert.tenant_page_to_pb(Page(tuple(TenantInfo.of(t) for t in tenants), token))

    @_admin
    async def RotateSigningSecret(
        self, request: pb.RotateSigningSecretRequest, _: None
    ) -> pb.RotateSigningSecretResponse:
        issued = await self._admin.rotate_secret(tenant_name(request.name), request.retire_previous)
        return convert.secret_rotated_to_pb(
            SecretRotated(TenantInfo.of(issued.tenant), issued.secret)
        )

    @_admin
    async def IssueToken(self, request: pb.IssueTokenRequest, _: None) -> pb.IssueTokenResponse:
        issued = await self._admin.issue_token(tenant_name(request.name))
        return convert.token_issued_to_pb(TokenIssued(TenantInfo.of(issued.tenant), issued.secret))

    @_admin
    async def RevokeTokens(self, request: pb.RevokeTokensRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.revoke_tokens(tenant_name(request.name)))

    @_admin
    async def SetTenantLimits(self, request: pb.SetTenantLimitsRequest, _: None) -> pb.Tenant:
        limits = convert.limits_from_pb(request.limits)
        return tenant_to_pb(await self._admin.set_limits(tenant_name(request.name), limits))

    @_admin
    async def PauseTenant(self, request: pb.PauseTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.set_paused(tenant_name(request.name), True))

    @_admin
    async def ResumeTenant(self, request: pb.ResumeTenantRequest, _: None) -> pb.Tenant:
        return tenant_to_pb(await self._admin.set_paused(tenant_name(request.name), False))

    @_admin
    async def SetTenantDefaults(self, request: pb.SetTenantDefaultsRequest, _: None) -> pb.Tenant:
        defaults = convert.defaults_from_pb(request.defaults)
        return tenant_to_pb(await self._admin.set_defaults(tenant_name(request.name), defaults))
