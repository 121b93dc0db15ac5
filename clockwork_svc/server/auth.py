"""Authentication: the tenant of a call comes from its credential.

Tokens are configured as `tenant:token` pairs and kept only as SHA-256 hashes.
A call carries `authorization: Bearer <token>`. With auth disabled (allowed only
for `clockwork dev` on loopback) the tenant is read from the `clockwork-tenant`
metadata key, default "default".

The interceptor wraps each method handler so the resolved tenant is visible to the
servicer through a context variable set in the handler's own task.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from clockwork_svc.domain.spec import TENANT_PATTERN

TENANT_METADATA = "clockwork-tenant"
DEFAULT_TENANT = "default"
# Health checks and reflection are open so probes and tools work without a token.
OPEN_SERVICE_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("clockwork_tenant")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class AuthSettings:
    enabled: bool = True
    # sha256(token) -> tenant
    token_hashes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_pairs(cls, text: str, enabled: bool = True) -> AuthSettings:
        """Parse 'tenant:token,tenant2:token2'; raises ValueError naming the bad entry."""
        hashes: dict[str, str] = {}
        for entry in (e.strip() for e in text.split(",")):
            if not entry:
                continue
            tenant, sep, token = entry.partition(":")
            if not sep or not TENANT_PATTERN.fullmatch(tenant) or len(token) < 16:
                raise ValueError(
                    "each API token entry must be TENANT:TOKEN with a token of 16+ characters"
                )
            hashes[hash_token(token)] = tenant
        return cls(enabled, hashes)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, settings: AuthSettings) -> None:
        self._settings = settings

    def _tenant(self, metadata: Mapping[str, str]) -> tuple[str | None, str]:
        if not self._settings.enabled:
            tenant = metadata.get(TENANT_METADATA, DEFAULT_TENANT)
            if not TENANT_PATTERN.fullmatch(tenant):
                return None, f"invalid {TENANT_METADATA} metadata"
            return tenant, ""
        header = metadata.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None, "missing bearer token"
        digest = hash_token(token.strip())
        for known, tenant in self._settings.token_hashes.items():
            if hmac.compare_digest(known, digest):
                asked = metadata.get(TENANT_METADATA)
                if asked and asked != tenant:
                    return None, "token does not belong to the requested tenant"
                return tenant, ""
        return None, "invalid token"

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICE_PREFIXES):
            return handler
        if handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        resolve = self._tenant

        async def authenticated(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
            tenant, problem = resolve(metadata)
            if tenant is None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)
            current_tenant.set(tenant or "")
            return await inner(request, context)  # type: ignore[arg-type]

        return grpc.unary_unary_rpc_method_handler(
            authenticated,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
