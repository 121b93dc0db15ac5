"""The columns of each stored record, and how a record maps to them: one definition
that the SQLite store, the Cassandra store and the benchmarks that write the stores'
rows directly all use.

Values are in neutral form: text, integers, bytes, booleans, None, and lists of text
for `list_columns` (a `list<text>` in Cassandra, JSON text in SQLite). A row read
back is any mapping from column name to value (the Cassandra driver's dicts,
`sqlite3.Row`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeVar

from clockwork_svc.domain import labels
from clockwork_svc.domain.codec import spec_from_json, spec_to_json
from clockwork_svc.domain.model import (
    DeadLetter,
    Execution,
    Firing,
    Outcome,
    Progress,
    Schedule,
    ScheduleState,
    TriggerRequest,
)
from clockwork_svc.domain.spec import OverlapPolicy
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits

R = TypeVar("R")


class Row(Protocol):
    """A row read back: values by column name."""

    def __getitem__(self, name: str, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Table(Generic[R]):
    name: str
    # The primary key's columns first, then the others; `encode` returns values in
    # this order.
    columns: tuple[str, ...]
    key: tuple[str, ...]
    encode: Callable[[R], tuple[Any, ...]]
    decode: Callable[[Row], R]
    # Read with the record but never written by its insert (set by later writes,
    # which an insert repeated after a crash must not clear).
    read_only: tuple[str, ...] = ()
    list_columns: frozenset[str] = frozenset()
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.columns)})

    @property
    def names(self) -> str:
        """The written columns, comma-separated (an INSERT's column list)."""
        return ", ".join(self.columns)

    @property
    def selected(self) -> str:
        """Every column `decode` reads, comma-separated (a SELECT's list)."""
        return ", ".join(self.columns + self.read_only)

    @property
    def others(self) -> tuple[str, ...]:
        """The columns outside the primary key."""
        return tuple(c for c in self.columns if c not in self.key)

    def pick(self, values: Sequence[Any], names: Sequence[str]) -> tuple[Any, ...]:
        """From `encode`'s values, those of `names`, in that order."""
        return tuple(values[self._index[n]] for n in names)


def markers(count: int) -> str:
    return ", ".join("?" * count)


def assignments(names: Sequence[str]) -> str:
    """`a = ?, b = ?`: an UPDATE's SET list."""
    return ", ".join(f"{n} = ?" for n in names)


def _schedule_values(s: Schedule) -> tuple[Any, ...]:
    return (
        s.tenant,
        s.key,
        s.id,
        spec_to_json(s.spec),
        s.spec.payload,
        s.state.value,
        s.version,
        s.created_ms,
        s.updated_ms,
        s.shard,
        s.next_fire_ms,
        s.last_fire_ms,
        s.last_outcome.value if s.last_outcome else None,
        s.fired_count,
        s.note,
        s.failures_in_row,
        labels.encode(s.labels),
        s.trace_parent or None,
    )


def _schedule(row: Row) -> Schedule:
    return Schedule(
        tenant=row["tenant"],
        key=row["key"],
        id=row["id"],
        spec=spec_from_json(row["spec"], bytes(row["payload"] or b"")),
        state=ScheduleState(row["state"]),
        version=row["version"],
        created_ms=row["created_ms"],
        updated_ms=row["updated_ms"],
        shard=row["shard"],
        next_fire_ms=row["next_fire_ms"],
        last_fire_ms=row["last_fire_ms"],
        last_outcome=Outcome(row["last_outcome"]) if row["last_outcome"] else None,
        fired_count=row["fired_count"] or 0,
        note=row["note"] or "",
        failures_in_row=row["failures_in_row"] or 0,
        labels=labels.decode(row["labels"]),
        trace_parent=row["trace_parent"] or "",
    )


SCHEDULES: Table[Schedule] = Table(
    "schedules",
    (
        "tenant",
        "key",
        "id",
        "spec",
        "payload",
        "state",
        "version",
        "created_ms",
        "updated_ms",
        "shard",
        "next_fire_ms",
        "last_fire_ms",
        "last_outcome",
        "fired_count",
        "note",
        "failures_in_row",
        "labels",
        "trace_parent",
    ),
    ("tenant", "key"),
    _schedule_values,
    _schedule,
    list_columns=frozenset({"labels"}),
)

SCHEDULE_CHANGE = (
    "spec",
    "payload",
    "state",
    "version",
    "updated_ms",
    "next_fire_ms",
    "note",
    "failures_in_row",
)
"""What a version change (update, pause, resume, cancel) rewrites of a schedule."""

PROGRESS = ("next_fire_ms", "last_fire_ms", "last_outcome", "fired_count", "failures_in_row")
"""What a worker records of a schedule after each occurrence."""


def progress_values(p: Progress) -> tuple[Any, ...]:
    """The values of PROGRESS."""
    return (
        p.next_fire_ms,
        p.last_fire_ms,
        p.last_outcome.value if p.last_outcome else None,
        p.fired_count,
        p.failures_in_row,
    )


# Each the name of a Firing attribute.
_FIRING_COLUMNS = (
    "shard",
    "fire_at_ms",
    "firing_id",
    "tenant",
    "schedule_key",
    "schedule_id",
    "version",
    "seq",
    "occurrence_ms",
    "attempt",
    "delivery_id",
    "redrive",
    "ordering_key",
    "payload",
    "overlap",
)


_firing_attributes = attrgetter(*_FIRING_COLUMNS[:-1])


def _firing_values(f: Firing) -> tuple[Any, ...]:
    return (*_firing_attributes(f), f.overlap.value)


def _firing(row: Row) -> Firing:
    return Firing(
        shard=row["shard"],
        fire_at_ms=row["fire_at_ms"],
        firing_id=row["firing_id"],
        tenant=row["tenant"],
        schedule_key=row["schedule_key"],
        schedule_id=row["schedule_id"],
        version=row["version"],
        seq=row["seq"],
        occurrence_ms=row["occurrence_ms"],
        attempt=row["attempt"],
        delivery_id=row["delivery_id"],
        done=bool(row["done"]),
        redrive=row["redrive"] or 0,
        ordering_key=row["ordering_key"] or "",
        payload=row["payload"],
        overlap=OverlapPolicy(row["overlap"] or "allow_all"),
    )


FIRINGS: Table[Firing] = Table(
    "firings",
    _FIRING_COLUMNS,
    ("shard", "fire_at_ms", "firing_id"),
    _firing_values,
    _firing,
    read_only=("done",),
)


def _execution_values(e: Execution) -> tuple[Any, ...]:
    return (
        e.tenant,
        e.schedule_key,
        e.started_ms,
        e.firing_id,
        e.delivery_id,
        e.attempt,
        e.occurrence_ms,
        e.due_ms,
        e.duration_ms,
        e.outcome.value,
        e.status_code,
        e.error,
        e.next_attempt_ms,
        e.response_body,
        json.dumps(e.response_headers) if e.response_headers else None,
    )


def _execution(row: Row) -> Execution:
    return Execution(
        tenant=row["tenant"],
        schedule_key=row["schedule_key"],
        firing_id=row["firing_id"],
        delivery_id=row["delivery_id"],
        attempt=row["attempt"],
        occurrence_ms=row["occurrence_ms"],
        due_ms=row["due_ms"],
        started_ms=row["started_ms"],
        duration_ms=row["duration_ms"],
        outcome=Outcome(row["outcome"]),
        status_code=row["status_code"],
        error=row["error"] or "",
        next_attempt_ms=row["next_attempt_ms"],
        response_body=bytes(row["response_body"] or b""),
        response_headers=tuple(
            (str(name), str(value)) for name, value in json.loads(row["response_headers"] or "[]")
        ),
    )


EXECUTIONS: Table[Execution] = Table(
    "executions",
    (
        "tenant",
        "schedule_key",
        "started_ms",
        "firing_id",
        "delivery_id",
        "attempt",
        "occurrence_ms",
        "due_ms",
        "duration_ms",
        "outcome",
        "status_code",
        "error",
        "next_attempt_ms",
        "response_body",
        "response_headers",
    ),
    ("tenant", "schedule_key", "started_ms", "firing_id"),
    _execution_values,
    _execution,
)


# Each the name of a DeadLetter attribute.
_DEAD_LETTER_COLUMNS = (
    "tenant",
    "dead_ms",
    "firing_id",
    "schedule_key",
    "schedule_id",
    "delivery_id",
    "shard",
    "seq",
    "occurrence_ms",
    "attempts",
    "last_status",
    "last_error",
    "payload",
)


def _dead_letter(row: Row) -> DeadLetter:
    return DeadLetter(**{c: row[c] for c in (*_DEAD_LETTER_COLUMNS, "redriven_ms")})


# Each the name of a TriggerRequest attribute.
_TRIGGER_REQUEST_COLUMNS = (
    "tenant",
    "key",
    "request_id",
    "shard",
    "fire_at_ms",
    "firing_id",
    "delivery_id",
    "version",
    "created_ms",
    "written",
)


def _trigger_request(row: Row) -> TriggerRequest:
    values = {c: row[c] for c in _TRIGGER_REQUEST_COLUMNS}
    return TriggerRequest(**{**values, "written": bool(values["written"])})


TRIGGER_REQUESTS: Table[TriggerRequest] = Table(
    "trigger_requests",
    _TRIGGER_REQUEST_COLUMNS,
    ("tenant", "key", "request_id"),
    attrgetter(*_TRIGGER_REQUEST_COLUMNS),
    _trigger_request,
)


DEAD_LETTERS: Table[DeadLetter] = Table(
    "dead_letters",
    _DEAD_LETTER_COLUMNS,
    ("tenant", "dead_ms", "firing_id"),
    attrgetter(*_DEAD_LETTER_COLUMNS),
    _dead_letter,
    read_only=("redriven_ms",),
)


def _tenant_values(t: Tenant) -> tuple[Any, ...]:
    return (
        t.name,
        t.created_ms,
        t.updated_ms,
        t.version,
        list(t.signing_secrets),
        list(t.token_hashes),
        t.limits.to_json(),
        t.defaults.to_json(),
    )


def _tenant(row: Row) -> Tenant:
    return Tenant(
        name=row["name"],
        created_ms=row["created_ms"],
        updated_ms=row["updated_ms"],
        version=row["version"],
        signing_secrets=tuple(row["signing_secrets"] or ()),
        token_hashes=tuple(row["token_hashes"] or ()),
        limits=TenantLimits.from_json(row["limits"]),
        defaults=TenantDefaults.from_json(row["defaults"]),
    )


TENANTS: Table[Tenant] = Table(
    "tenants",
    (
        "name",
        "created_ms",
        "updated_ms",
        "version",
        "signing_secrets",
        "token_hashes",
        "limits",
        "defaults",
    ),
    ("name",),
    _tenant_values,
    _tenant,
    list_columns=frozenset({"signing_secrets", "token_hashes"}),
)
