"""Authentication: the tenant of a call comes from its credential.

A call carries `authorization: Bearer <token>`. Tokens are kept only as SHA-256
hashes: tenant tokens come from configuration (`tenant:token` pairs) or are issued
through TenantService and looked up in the store; admin tokens come from
configuration and may act for any tenant (named in the `clockwork-tenant` metadata).
With auth disabled (allowed only on loopback) every caller is an admin and the tenant
is read from `clockwork-tenant`, default "default".

Every call resolves its principal first (call_pipeline.py), which the servicer reads
from a context variable set in the call's own task.
"""

from __future__ import annotations

import contextvars
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from clockwork_svc.domain.spec import TENANT_PATTERN
from clockwork_svc.domain.tenant import hash_token

TENANT_METADATA = "clockwork-tenant"
DEFAULT_TENANT = "default"
# Health checks and reflection are open so probes and tools work without a token.
OPEN_SERVICE_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant it acts for (None for an admin naming no tenant)."""

    tenant: str | None
    admin: bool


current_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("clockwork_principal")


class TokenLookup(Protocol):
    async def tenant_of(self, token_hash: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class AuthSettings:
    enabled: bool = True
    # sha256(token) -> tenant, from configuration (tokens issued through the API live
    # in the store instead).
    token_hashes: Mapping[str, str] = field(default_factory=dict)
    # sha256 of admin tokens: tenant administration, and acting for any tenant.
    admin_token_hashes: frozenset[str] = frozenset()

    @classmethod
    def from_pairs(cls, text: str, enabled: bool = True, admin_token: str = "") -> AuthSettings:
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
        if admin_token and len(admin_token) < 16:
            raise ValueError("the admin token must have 16+ characters")
        admins = frozenset({hash_token(admin_token)} if admin_token else ())
        return cls(enabled, hashes, admins)

    @property
    def has_credentials(self) -> bool:
        return bool(self.token_hashes or self.admin_token_hashes)


class Authenticator:
    def __init__(self, settings: AuthSettings, tokens: TokenLookup | None = None) -> None:
        self._settings = settings
        self._tokens = tokens

    async def resolve(self, metadata: Mapping[str, str]) -> tuple[Principal | None, str]:
        """The principal a call's metadata names, or None and why not."""
        asked = metadata.get(TENANT_METADATA)
        if asked is not None and not TENANT_PATTERN.fullmatch(asked):
            return None, f"invalid {TENANT_METADATA} metadata"
        if not self._settings.enabled:
            return Principal(asked or DEFAULT_TENANT, admin=True), ""
        header = metadata.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None, "missing bearer token"
        digest = hash_token(token.strip())
        if any(hmac.compare_digest(digest, h) for h in self._settings.admin_token_hashes):
            return Principal(asked, admin=True), ""
        tenant = self._settings.token_hashes.get(digest)
        if tenant is None and self._tokens is not None:
            tenant = await self._tokens.tenant_of(digest)
        if tenant is None:
            return None, "invalid token"
        if asked and asked != tenant:
            return None, "token does not belong to the requested tenant"
        return Principal(tenant, admin=False), ""
