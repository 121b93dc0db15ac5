"""What a schedule is: its trigger, target, payload and delivery policies.

Pure data and validation; nothing here performs I/O. A `ScheduleSpec` is stored
exactly as the client gave it (defaults are resolved when used), so that a
repeated create can be compared with the stored one for idempotency.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from clockwork_svc.domain import triggers
from clockwork_svc.errors import InvalidArgument

KEY_PATTERN = re.compile(r"^[A-Za-z0-9._:/=-]{1,200}$")
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
KAFKA_TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
HEADER_NAME_PATTERN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
# Headers the delivery sets itself; a schedule may not override them.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "user-agent",
        "traceparent",
    }
)
ALLOWED_METHODS = ("POST", "PUT", "PATCH")
DEFAULT_METHOD = "POST"
MAX_HEADERS = 32
MAX_HEADER_VALUE = 4096
MAX_URL_LENGTH = 2048
MAX_TIMEOUT_MS = 300_000
DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_RELEVANCY_MS = 3_600_000
MAX_RELEVANCY_MS = 30 * 86_400_000
MAX_JITTER_MS = 86_400_000
MAX_ATTEMPTS = 100
MAX_RETRY_DELAY_MS = 7 * 86_400_000


class RetryKind(enum.Enum):
    DEFAULT = "default"
    NONE = "none"
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class MisfirePolicy(enum.Enum):
    FIRE_LATEST = "fire_latest"
    SKIP = "skip"


class OverlapPolicy(enum.Enum):
    """What happens to an occurrence due while the schedule's previous delivery is still
    in flight or has a retry pending."""

    ALLOW_ALL = "allow_all"  # it is sent anyway
    SKIP = "skip"  # it is not sent: recorded SKIPPED
    BUFFER_ONE = "buffer_one"  # it waits (one at most) and is sent when the other ends


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed deliveries are retried. Zero values mean "the default"."""

    kind: RetryKind = RetryKind.DEFAULT
    max_attempts: int = 0
    initial_delay_ms: int = 0
    max_delay_ms: int = 0
    multiplier: float = 0.0
    # Give up once this long has passed since the occurrence was due (0: no limit).
    max_age_ms: int = 0

    def resolved(self) -> RetryPolicy:
        """The policy with defaults filled in (DEFAULT means exponential, 5 attempts)."""
        kind = RetryKind.EXPONENTIAL if self.kind is RetryKind.DEFAULT else self.kind
        if kind is RetryKind.NONE:
            return RetryPolicy(kind, 1, 0, 0, 0.0, self.max_age_ms)
        attempts = self.max_attempts or 5
        initial = self.initial_delay_ms or 1_000
        max_delay = self.max_delay_ms or (initial if kind is RetryKind.FIXED else 300_000)
        multiplier = self.multiplier or 2.0
        return RetryPolicy(
            kind, attempts, initial, max(max_delay, initial), multiplier, self.max_age_ms
        )


@dataclass(frozen=True, slots=True)
class HttpTarget:
    url: str
    method: str = DEFAULT_METHOD
    headers: tuple[tuple[str, str], ...] = ()
    timeout_ms: int = 0

    @property
    def effective_timeout_ms(self) -> int:
        return self.timeout_ms or DEFAULT_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class KafkaTarget:
    """Produce the payload to a topic; the message key is the ordering key, or else the
    schedule key, so one key's messages stay in order on one partition."""

    topic: str
    headers: tuple[tuple[str, str], ...] = ()


Target = HttpTarget | KafkaTarget


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    trigger: triggers.Trigger
    target: Target
    payload: bytes = b""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    relevancy_window_ms: int = 0
    jitter_ms: int = 0
    ordering_key: str = ""
    misfire: MisfirePolicy = MisfirePolicy.FIRE_LATEST
    # Pause the schedule after this many consecutive occurrences failed for good
    # (dead-lettered); 0: never.
    pause_after_failures: int = 0
    overlap: OverlapPolicy = OverlapPolicy.ALLOW_ALL

    @property
    def effective_relevancy_ms(self) -> int:
        return self.relevancy_window_ms or DEFAULT_RELEVANCY_MS


MAX_PAUSE_AFTER_FAILURES = 1000
MAX_NOTE_CHARS = 1024


def validate_note(note: str, name: str = "note") -> None:
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidArgument(name, f"is {len(note)} characters; at most {MAX_NOTE_CHARS}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Server-side limits applied by validation (from settings)."""

    max_payload_bytes: int = 64 * 1024


def validate_key(key: str, name: str = "key") -> None:
    if not KEY_PATTERN.fullmatch(key):
        raise InvalidArgument(name, "must be 1-200 characters of [A-Za-z0-9._:/=-]")


def validate_tenant(tenant: str, name: str = "tenant") -> None:
    if not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidArgument(name, "must be 1-64 characters of [A-Za-z0-9._-]")


def validate_spec(spec: ScheduleSpec, limits: Limits, prefix: str = "spec") -> None:
    """Raises InvalidArgument naming the first invalid field."""
    try:
        triggers.validate(spec.trigger)
    except triggers.TriggerError as exc:
        raise InvalidArgument(f"{prefix}.{exc.field}", exc.message) from exc
    if isinstance(spec.target, KafkaTarget):
        _validate_kafka(spec.target, f"{prefix}.kafka")
    else:
        _validate_target(spec.target, f"{prefix}.http")
    if len(spec.payload) > limits.max_payload_bytes:
        raise InvalidArgument(
            f"{prefix}.payload",
            f"is {len(spec.payload)} bytes; the limit is {limits.max_payload_bytes}",
        )
    _validate_retry(spec.retry, f"{prefix}.retry")
    if not 0 <= spec.pause_after_failures <= MAX_PAUSE_AFTER_FAILURES:
        raise InvalidArgument(
            f"{prefix}.pause_after_failures", f"must be between 0 and {MAX_PAUSE_AFTER_FAILURES}"
        )
    if not 0 <= spec.relevancy_window_ms <= MAX_RELEVANCY_MS:
        raise InvalidArgument(f"{prefix}.relevancy_window", "must be between 0 and 30 days")
    if not 0 <= spec.jitter_ms <= MAX_JITTER_MS:
        raise InvalidArgument(f"{prefix}.jitter", "must be between 0 and 1 day")
    if spec.ordering_key:
        validate_key(spec.ordering_key, f"{prefix}.ordering_key")
        if spec.overlap is not OverlapPolicy.ALLOW_ALL:
            raise InvalidArgument(
                f"{prefix}.overlap",
                "an ordering key already sends each delivery only after the previous one "
                "ended; leave overlap at ALLOW_ALL",
            )


def _validate_target(target: HttpTarget, prefix: str) -> None:
    if not target.url:
        raise InvalidArgument(f"{prefix}.url", "is required")
    if len(target.url) > MAX_URL_LENGTH:
        raise InvalidArgument(f"{prefix}.url", f"is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(target.url)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(f"{prefix}.url", f"is malformed: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidArgument(f"{prefix}.url", "scheme must be http or https")
    if not parts.hostname:
        raise InvalidArgument(f"{prefix}.url", "has no host")
    if parts.username or parts.password:
        raise InvalidArgument(f"{prefix}.url", "must not carry credentials; use headers")
    if port == 0:
        raise InvalidArgument(f"{prefix}.url", "port 0 is not allowed")
    if any(ch.isspace() for ch in target.url):
        raise InvalidArgument(f"{prefix}.url", "must not contain white space")
    if target.method not in ALLOWED_METHODS:
        raise InvalidArgument(f"{prefix}.method", f"must be one of {', '.join(ALLOWED_METHODS)}")
    _validate_headers(target.headers, f"{prefix}.headers")
    for name, value in target.headers:
        # HTTP header values cannot carry line breaks (header injection).
        if any(ch in value for ch in "\r\n\0"):
            raise InvalidArgument(f"{prefix}.headers", f"invalid value for header {name!r}")
    if not 0 <= target.timeout_ms <= MAX_TIMEOUT_MS:
        raise InvalidArgument(f"{prefix}.timeout", "must be between 0 and 5 minutes")


def _validate_kafka(target: KafkaTarget, prefix: str) -> None:
    if not KAFKA_TOPIC_PATTERN.fullmatch(target.topic) or target.topic in (".", ".."):
        raise InvalidArgument(f"{prefix}.topic", "must be 1-249 characters of [A-Za-z0-9._-]")
    _validate_headers(target.headers, f"{prefix}.headers")


def _validate_headers(headers: tuple[tuple[str, str], ...], field: str) -> None:
    """Rules shared by every target's headers: count, names, reserved names, length."""
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(field, f"at most {MAX_HEADERS} headers")
    for name, value in headers:
        if not HEADER_NAME_PATTERN.fullmatch(name):
            raise InvalidArgument(field, f"invalid header name {name!r}")
        if name.lower() in RESERVED_HEADERS:
            raise InvalidArgument(field, f"header {name!r} is set by Clockwork")
        if len(value) > MAX_HEADER_VALUE:
            raise InvalidArgument(field, f"value of {name!r} is too long")


def _validate_retry(policy: RetryPolicy, prefix: str) -> None:
    if not 0 <= policy.max_attempts <= MAX_ATTEMPTS:
        raise InvalidArgument(f"{prefix}.max_attempts", f"must be between 0 and {MAX_ATTEMPTS}")
    if not 0 <= policy.initial_delay_ms <= MAX_RETRY_DELAY_MS:
        raise InvalidArgument(f"{prefix}.initial_delay", "must be between 0 and 7 days")
    if not 0 <= policy.max_delay_ms <= MAX_RETRY_DELAY_MS:
        raise InvalidArgument(f"{prefix}.max_delay", "must be between 0 and 7 days")
    if not 0 <= policy.max_age_ms <= MAX_RELEVANCY_MS:
        raise InvalidArgument(f"{prefix}.max_age", "must be between 0 and 30 days")
    if not (policy.multiplier == 0.0 or 1.0 <= policy.multiplier <= 100.0):
        raise InvalidArgument(f"{prefix}.multiplier", "must be 0 (default) or between 1 and 100")


def is_loopback_host(host: str) -> bool:
    """True for names and literals that denote this machine (used by dev mode checks)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
