"""What the v1 API takes and answers where the domain has no type of its own: pages,
a dead-letter range, tenants and dead letters as the API shows them, and the answers
that carry a newly issued secret. The client (clockwork_svc/client.py) speaks these
and the domain types; clockwork_svc/api/v1/convert.py maps both to the messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from clockwork_svc.domain.model import DeadLetter
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; `next_page_token` asks for the next ("" after the last)."""

    items: tuple[T, ...]
    next_page_token: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetterRange:
    """The dead letters a listing or a redrive covers: dead in [since_ms, until_ms)
    (None: the server's default, the last 7 days up to now), of schedule `key` ("": of
    every schedule)."""

    since_ms: int | None = None
    until_ms: int | None = None
    key: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    """A dead letter as the API shows it: the domain's `DeadLetter` without where it is
    stored (shard, sequence, schedule id)."""

    schedule_key: str
    firing_id: str
    delivery_id: str
    occurrence_ms: int
    attempts: int
    dead_ms: int
    last_status: int = 0
    last_error: str = ""
    redriven_ms: int | None = None

    @classmethod
    def of(cls, letter: DeadLetter) -> DeadLetterInfo:
        return cls(
            schedule_key=letter.schedule_key,
            firing_id=letter.firing_id,
            delivery_id=letter.delivery_id,
            occurrence_ms=letter.occurrence_ms,
            attempts=letter.attempts,
            dead_ms=letter.dead_ms,
            last_status=letter.last_status,
            last_error=letter.last_error,
            redriven_ms=letter.redriven_ms,
        )


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """A tenant as the API shows it: the domain's `Tenant` with its signing secrets and
    token hashes only counted. `limits.paused` tells whether it is paused."""

    name: str
    created_ms: int
    updated_ms: int
    version: int
    signing_secret_count: int = 0
    token_count: int = 0
    limits: TenantLimits = field(default_factory=TenantLimits)
    defaults: TenantDefaults = field(default_factory=TenantDefaults)

    @property
    def paused(self) -> bool:
        return self.limits.paused

    @classmethod
    def of(cls, tenant: Tenant) -> TenantInfo:
        return cls(
            name=tenant.name,
            created_ms=tenant.created_ms,
            updated_ms=tenant.updated_ms,
            version=tenant.version,
            signing_secret_count=len(tenant.signing_secrets),
            token_count=len(tenant.token_hashes),
            limits=tenant.limits,
            defaults=tenant.defaults,
        )


@dataclass(frozen=True, slots=True)
class TenantCreated:
    """A new tenant with its first API token and signing secret (shown only here)."""

    tenant: TenantInfo
    token: str
    signing_secret: str


@dataclass(frozen=True, slots=True)
class SecretRotated:
    """A tenant after a rotation, and its new signing secret (shown only here)."""

    tenant: TenantInfo
    signing_secret: str


@dataclass(frozen=True, slots=True)
class TokenIssued:
    """A tenant with one more API token, and that token (shown only here)."""

    tenant: TenantInfo
    token: str
