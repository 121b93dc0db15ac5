"""The records Clockwork stores: schedules, firings, executions, shard cursors.

Times are integer milliseconds since the Unix epoch (UTC) throughout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from clockwork_svc.domain.labels import Labels, Selector
from clockwork_svc.domain.spec import OverlapPolicy, ScheduleSpec


class ScheduleState(enum.Enum):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class Outcome(enum.Enum):
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    FAILED = "failed"
    EXPIRED = "expired"
    # Not sent: the previous delivery was still running (overlap SKIP), or missed while
    # no worker could fire it (the misfire policy).
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """Fixed when the cluster is created; every process must agree on it."""

    shard_count: int
    bucket_ms: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class Schedule:
    tenant: str
    key: str
    id: str
    spec: ScheduleSpec
    state: ScheduleState
    version: int
    created_ms: int
    updated_ms: int
    shard: int
    next_fire_ms: int | None = None
    last_fire_ms: int | None = None
    last_outcome: Outcome | None = None
    fired_count: int = 0
    # Who paused it and why (set by a pause, cleared by a resume).
    note: str = ""
    # Occurrences in a row that failed for good (reset by a success).
    failures_in_row: int = 0
    # (key, value) pairs sorted by key (domain/labels.py); not part of the spec.
    labels: Labels = ()
    # The W3C trace context of the call that created it ("" if none), which each
    # delivery continues (domain/trace_context.py); not part of the spec.
    trace_parent: str = ""


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """One create request: the key, the spec, the labels (normalized) and the trace
    context of the call (normalized, "" if none)."""

    key: str
    spec: ScheduleSpec
    labels: Labels = ()
    trace_parent: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleQuery:
    """Which of a tenant's schedules a listing keeps: keys starting with `prefix`, in
    one of `states` (empty: any), matching `selector` (None: any)."""

    prefix: str = ""
    states: frozenset[ScheduleState] = frozenset()
    selector: Selector | None = None

    @property
    def key_end(self) -> str:
        """Above every key starting with the prefix (keys are ASCII)."""
        return self.prefix + "\U0010ffff"

    def start(self, after_key: str | None) -> str:
        """The first key a page can hold is at or above this (the key `after_key`
        itself excluded)."""
        return max(after_key or "", self.prefix)

    def matches(self, schedule: Schedule) -> bool:
        return (
            schedule.key.startswith(self.prefix)
            and (not self.states or schedule.state in self.states)
            and (self.selector is None or self.selector.matches(schedule.labels))
        )


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of a search and where the next starts (None: no more); a page may hold
    fewer than asked for and still have a next (the scan stopped at its budget)."""

    schedules: tuple[Schedule, ...]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class ScheduleDetail:
    """A schedule with its future and its past: the nominal times of its next
    occurrences (`planning.upcoming`) and its latest executions, newest first."""

    schedule: Schedule
    upcoming_ms: tuple[int, ...] = ()
    recent: tuple[Execution, ...] = ()


@dataclass(frozen=True, slots=True)
class Created:
    """The answer to a create: the schedule, and whether this call created it (False:
    it existed already with the same spec)."""

    schedule: Schedule
    created: bool


@dataclass(frozen=True, slots=True)
class Progress:
    """Runtime columns of a schedule, written by workers (never by the API)."""

    next_fire_ms: int | None
    last_fire_ms: int | None
    last_outcome: Outcome | None
    fired_count: int
    failures_in_row: int = 0


@dataclass(frozen=True, slots=True)
class Firing:
    """One attempt to deliver one occurrence of a schedule, due at `fire_at_ms`.

    A firing row is written once and only ever gains `done = True`; a retry or the
    next occurrence is a new row with a deterministic id, so every write is an
    idempotent upsert.
    """

    shard: int
    fire_at_ms: int
    firing_id: str
    tenant: str
    schedule_key: str
    schedule_id: str
    version: int
    seq: int
    occurrence_ms: int
    attempt: int
    delivery_id: str
    done: bool = False
    # 0 for a normal firing; for a redriven dead letter, a generation number that makes
    # its firing ids new (fresh attempts) while its delivery id stays the same.
    redrive: int = 0
    # The schedule's ordering key (denormalised so the worker can sequence firings
    # before reading their schedules); "" when the schedule has none.
    ordering_key: str = ""
    # Sent instead of the schedule's payload (a trigger-now with its own payload).
    payload: bytes | None = None
    # The schedule's overlap policy (denormalised, as the ordering key, so the worker
    # can sequence firings before reading their schedules).
    overlap: OverlapPolicy = OverlapPolicy.ALLOW_ALL

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.fire_at_ms, self.firing_id)


@dataclass(frozen=True, slots=True)
class FiringKey:
    """Where a firing sits in its shard, and whether it is done: what a re-read of a
    range already read needs (`Store.scan_firing_keys`)."""

    fire_at_ms: int
    firing_id: str
    done: bool

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.fire_at_ms, self.firing_id)


@dataclass(frozen=True, slots=True)
class Execution:
    """The recorded result of one firing."""

    tenant: str
    schedule_key: str
    firing_id: str
    delivery_id: str
    attempt: int
    occurrence_ms: int
    due_ms: int
    started_ms: int
    duration_ms: int
    outcome: Outcome
    status_code: int = 0
    error: str = ""
    next_attempt_ms: int | None = None
    # The first bytes of the response body (the tenant's capture size) and the
    # response headers in CAPTURED_HEADERS (for Kafka, where the record landed).
    response_body: bytes = b""
    response_headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A firing that failed for good (permanent error or attempts exhausted)."""

    tenant: str
    schedule_key: str
    schedule_id: str
    firing_id: str
    delivery_id: str
    shard: int
    seq: int
    occurrence_ms: int
    attempts: int
    dead_ms: int
    last_status: int = 0
    last_error: str = ""
    redriven_ms: int | None = None
    # The firing's own payload, when it had one (a trigger-now's): a redrive sends it.
    payload: bytes | None = None

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.dead_ms, self.firing_id)


MAX_RESPONSE_CAPTURE_BYTES = 65_536
"""The most of a response body an execution keeps (a tenant chooses up to this)."""

DEFAULT_RESPONSE_CAPTURE_BYTES = 1024

CAPTURED_HEADERS = ("Content-Type", "Content-Length", "Location", "Retry-After", "X-Request-Id")
"""The response headers an execution keeps, when the response has them."""

TRIGGER_REQUEST_TTL_MS = 86_400_000
"""How long a trigger-now request id is remembered (a repeat within it fires nothing)."""


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """A trigger-now call with a client's request id, and the firing it wrote: a repeat
    of the id finds it (`Store.claim_trigger`) instead of firing again."""

    tenant: str
    key: str
    request_id: str
    shard: int
    fire_at_ms: int
    firing_id: str
    delivery_id: str
    version: int
    created_ms: int
    # Its firing is known to be written.
    written: bool = False


class BulkAction(enum.Enum):
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    TRIGGER = "trigger"


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk action did to the schedules it went through: `applied` changed (or
    triggered), `skipped` had nothing to do (in that state already, or a repeat of the
    same request), `failed` met an error (the first ones in `failures`). `first_keys`:
    the first matches (a dry run's preview); `next_after`: where the next call goes on
    (None: every match was gone through)."""

    matched: int
    applied: int
    skipped: int
    failed: int
    first_keys: tuple[str, ...] = ()
    failures: tuple[tuple[str, str], ...] = ()
    next_after: str | None = None


@dataclass(frozen=True, slots=True)
class Backfilled:
    """What a backfill fired: how many occurrences, the first's and the last's times."""

    count: int
    first_ms: int | None = None
    last_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Triggered:
    """What a trigger-now did: the run it started, or (`triggered` False) the run an
    earlier call with the same request id started."""

    delivery_id: str
    firing_id: str
    due_ms: int
    triggered: bool


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What a redrive did: dead letters delivered again, and ones skipped (redriven
    before, and not asked to be again)."""

    redriven: int
    skipped: int


@dataclass(frozen=True, slots=True)
class ShardCursor:
    """Everything due before `position_ms` in the shard has been handled.

    `epoch` is the fencing token of the owner that last advanced it.
    """

    shard: int
    position_ms: int
    epoch: int


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What a delivery sink reports for one attempt.

    `retryable` distinguishes transient failures (5xx, timeouts, connection errors)
    from permanent ones; `retry_after_ms` carries a server's Retry-After hint;
    `stop_schedule` asks for the whole schedule to stop (HTTP 410 Gone).
    """

    ok: bool
    retryable: bool
    status_code: int = 0
    error: str = ""
    retry_after_ms: int | None = None
    stop_schedule: bool = False
    # Up to MAX_RESPONSE_CAPTURE_BYTES of the body, and the CAPTURED_HEADERS present.
    response_body: bytes = b""
    response_headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FiringRecord:
    """What a worker writes once a firing has come to something, before it marks the
    firing done (`Store.record_firing`): its execution, the schedule's progress, and
    what follows from the outcome."""

    execution: Execution
    progress: Progress
    # The firing was its schedule's last occurrence: this version is completed, at
    # `completed_ms` (None: the schedule goes on).
    completes_version: int | None = None
    completed_ms: int = 0
    dead_letter: DeadLetter | None = None
    # The firing's ordering key and the block to store for it: its delivery id while a
    # retry is due, "" to lift a block; None leaves the key's block untouched.
    ordering_key: str = ""
    ordering_block: str | None = None
    # The record of occurrences missed before this one (the misfire policy), if any.
    missed: Execution | None = None
