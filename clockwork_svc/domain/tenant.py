"""A tenant: its credentials and signing secrets (and, later, its delivery limits).

Tokens are stored only as SHA-256 hashes; a token is shown once, when issued.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from dataclasses import dataclass

from clockwork_svc.domain import triggers
from clockwork_svc.domain.codec import retry_from_dict, retry_to_dict
from clockwork_svc.domain.model import DEFAULT_RESPONSE_CAPTURE_BYTES, MAX_RESPONSE_CAPTURE_BYTES
from clockwork_svc.domain.spec import (
    HttpTarget,
    Limits,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    validate_spec,
)
from clockwork_svc.errors import InvalidArgument

TOKEN_PREFIX = "cwt_"
# Secrets kept at once: the newest plus the ones still being rotated out.
MAX_SIGNING_SECRETS = 3
MAX_TOKENS = 10


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """Delivery limits of a tenant, for the whole cluster (each worker enforces its
    share: limit x shards it owns / shard count, so no coordination is needed)."""

    # Deliveries started per second (token bucket); 0: unlimited.
    rate_per_s: float = 0.0
    # Bucket size; 0: max(1, rate_per_s).
    burst: int = 0
    # Deliveries in flight at once; 0: unlimited.
    max_concurrency: int = 0
    # Sidelined: firings are held (not sent, not expired) until resumed.
    paused: bool = False
    # After a resume, held firings drain at this rate (0: rate_per_s, or unlimited).
    drain_rate_per_s: float = 0.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> TenantLimits:
        if not text:
            return cls()
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


def validate_limits(limits: TenantLimits) -> None:
    if not 0 <= limits.rate_per_s <= 1_000_000:
        raise InvalidArgument("limits.rate_per_s", "must be between 0 and 1000000")
    if not 0 <= limits.burst <= 1_000_000:
        raise InvalidArgument("limits.burst", "must be between 0 and 1000000")
    if not 0 <= limits.max_concurrency <= 100_000:
        raise InvalidArgument("limits.max_concurrency", "must be between 0 and 100000")
    if not 0 <= limits.drain_rate_per_s <= 1_000_000:
        raise InvalidArgument("limits.drain_rate_per_s", "must be between 0 and 1000000")


@dataclass(frozen=True, slots=True)
class TenantDefaults:
    """What a tenant's schedules get when their spec leaves a policy unset."""

    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    relevancy_window_ms: int = 0
    # How much of each callback's response body an execution keeps.
    response_capture_bytes: int = DEFAULT_RESPONSE_CAPTURE_BYTES

    def to_json(self) -> str:
        doc = {
            "retry": retry_to_dict(self.retry),
            "relevancy_window_ms": self.relevancy_window_ms,
            "response_capture_bytes": self.response_capture_bytes,
        }
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> TenantDefaults:
        if not text:
            return cls()
        doc = json.loads(text)
        return cls(
            retry_from_dict(doc.get("retry", {})),
            doc.get("relevancy_window_ms", 0),
            doc.get("response_capture_bytes", DEFAULT_RESPONSE_CAPTURE_BYTES),
        )

    def apply(self, spec: ScheduleSpec) -> ScheduleSpec:
        """The spec with the tenant's defaults filled in where the spec has none."""
        retry = spec.retry if spec.retry.kind is not RetryKind.DEFAULT else self.retry
        relevancy = spec.relevancy_window_ms or self.relevancy_window_ms
        if retry is spec.retry and relevancy == spec.relevancy_window_ms:
            return spec
        return dataclasses.replace(spec, retry=retry, relevancy_window_ms=relevancy)


def validate_defaults(defaults: TenantDefaults) -> None:
    probe = ScheduleSpec(
        triggers.OnceTrigger(0),
        HttpTarget("https://example.com/"),
        retry=defaults.retry,
        relevancy_window_ms=defaults.relevancy_window_ms,
    )
    validate_spec(probe, Limits(), prefix="defaults")
    if not 0 <= defaults.response_capture_bytes <= MAX_RESPONSE_CAPTURE_BYTES:
        raise InvalidArgument(
            "defaults.response_capture_bytes",
            f"must be between 0 and {MAX_RESPONSE_CAPTURE_BYTES}",
        )


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    created_ms: int
    updated_ms: int
    version: int
    # Newest first; every one of them signs each delivery.
    signing_secrets: tuple[str, ...] = ()
    token_hashes: tuple[str, ...] = ()
    limits: TenantLimits = TenantLimits()
    defaults: TenantDefaults = TenantDefaults()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
