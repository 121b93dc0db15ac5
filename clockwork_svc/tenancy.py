"""Tenant administration (what TenantService does), and the cached tenant lookups the
API (token checks) and the worker (signing secrets) need on their hot paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from clockwork_svc.abc import Clock, Store
from clockwork_svc.domain import signing
from clockwork_svc.domain.spec import validate_tenant
from clockwork_svc.domain.tenant import (
    MAX_SIGNING_SECRETS,
    MAX_TOKENS,
    Tenant,
    TenantDefaults,
    TenantLimits,
    hash_token,
    new_token,
    validate_defaults,
    validate_limits,
)
from clockwork_svc.errors import AlreadyExists, Conflict, FailedPrecondition, NotFound

_CAS_ATTEMPTS = 5
NO_LIMITS = TenantLimits()
NO_DEFAULTS = TenantDefaults()
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Issued:
    tenant: Tenant
    secret: str


class TenantAdmin:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def create(self, name: str) -> tuple[Tenant, str, str]:
        """A new tenant with one token and one signing secret: (tenant, token, secret)."""
        validate_tenant(name)
        now = self._clock.now_ms()
        token, secret = new_token(), signing.new_secret()
        tenant = Tenant(name, now, now, 1, (secret,), (hash_token(token),))
        await self._store.put_token_owner(hash_token(token), name)
        if await self._store.insert_tenant(tenant) is not None:
            raise AlreadyExists(f"tenant {name!r} exists")
        return tenant, token, secret

    async def get(self, name: str) -> Tenant:
        validate_tenant(name)
        tenant = await self._store.get_tenant(name)
        if tenant is None:
            raise NotFound(f"no tenant {name!r}")
        return tenant

    async def list(self, after: str | None, limit: int) -> list[Tenant]:
        return await self._store.list_tenants(after, limit)

    async def rotate_secret(self, name: str, retire_previous: bool) -> Issued:
        secret = signing.new_secret()

        def change(t: Tenant) -> Tenant:
            kept = () if retire_previous else t.signing_secrets[: MAX_SIGNING_SECRETS - 1]
            return dataclasses.replace(t, signing_secrets=(secret, *kept))

        return Issued(await self._change(name, change), secret)

    async def issue_token(self, name: str) -> Issued:
        token = new_token()

        def change(t: Tenant) -> Tenant:
            if len(t.token_hashes) >= MAX_TOKENS:
                raise FailedPrecondition(f"tenant has {MAX_TOKENS} tokens; revoke first")
            return dataclasses.replace(t, token_hashes=(*t.token_hashes, hash_token(token)))

        await self._store.put_token_owner(hash_token(token), name)
        return Issued(await self._change(name, change), token)

    async def set_limits(self, name: str, limits: TenantLimits) -> Tenant:
        validate_limits(limits)
        return await self._change(
            name,
            lambda t: dataclasses.replace(
                t, limits=dataclasses.replace(limits, paused=t.limits.paused)
            ),
        )

    async def set_defaults(self, name: str, defaults: TenantDefaults) -> Tenant:
        validate_defaults(defaults)
        return await self._change(name, lambda t: dataclasses.replace(t, defaults=defaults))

    async def set_paused(self, name: str, paused: bool) -> Tenant:
        return await self._change(
            name,
            lambda t: dataclasses.replace(t, limits=dataclasses.replace(t.limits, paused=paused)),
        )

    async def revoke_tokens(self, name: str) -> Tenant:
        return await self._change(name, lambda t: dataclasses.replace(t, token_hashes=()))

    async def _change(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant:
        for _ in range(_CAS_ATTEMPTS):
            current = await self.get(name)
            changed = dataclasses.replace(
                change(current), version=current.version + 1, updated_ms=self._clock.now_ms()
            )
            if await self._store.replace_tenant(changed, current.version):
                return changed
        raise Conflict(f"tenant {name!r} keeps changing concurrently; try again")


class TtlCache(Generic[K, V]):
    """A small read-through cache: lookups on the hot path hit the store at most once
    per key per `ttl_s` (revocations and rotations take effect within that)."""

    def __init__(
        self,
        load: Callable[[K], Awaitable[V]],
        ttl_s: float,
        monotonic: Callable[[], float],
        max_entries: int = 10_000,
    ) -> None:
        self._load = load
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._max = max_entries
        self._entries: dict[K, tuple[float, V]] = {}

    async def get(self, key: K) -> V:
        now = self._monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        value = await self._load(key)
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[key] = (now + self._ttl_s, value)
        return value


class TenantView:
    """The worker's view of tenants: signing secrets and delivery limits (cached, so a
    rotation or a limit change takes effect within `ttl_s`)."""

    def __init__(self, store: Store, clock: Clock, ttl_s: float = 10.0) -> None:
        self._cache: TtlCache[str, Tenant | None] = TtlCache(
            store.get_tenant, ttl_s, clock.monotonic
        )

    async def signing_secrets(self, tenant: str) -> tuple[str, ...]:
        found = await self._cache.get(tenant)
        return found.signing_secrets if found is not None else ()

    async def limits(self, tenant: str) -> TenantLimits:
        found = await self._cache.get(tenant)
        return found.limits if found is not None else NO_LIMITS

    async def defaults(self, tenant: str) -> TenantDefaults:
        found = await self._cache.get(tenant)
        return found.defaults if found is not None else NO_DEFAULTS


class TokenDirectory:
    """Resolves an API token (by hash) to its tenant through the store (cached)."""

    def __init__(self, store: Store, clock: Clock, ttl_s: float = 10.0) -> None:
        async def load(token_hash: str) -> str | None:
            owner = await store.token_owner(token_hash)
            if owner is None:
                return None
            tenant = await store.get_tenant(owner)
            # The tenant row is the authority: a hash it no longer lists is revoked.
            return owner if tenant is not None and token_hash in tenant.token_hashes else None

        self._cache: TtlCache[str, str | None] = TtlCache(load, ttl_s, clock.monotonic)

    async def tenant_of(self, token_hash: str) -> str | None:
        return await self._cache.get(token_hash)
