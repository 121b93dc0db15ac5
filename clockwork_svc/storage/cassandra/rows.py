"""Converting between Cassandra rows (dicts) and Clockwork's records."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, TypeGuard

from clockwork_svc.domain.codec import spec_from_json
from clockwork_svc.domain.model import (
    DeadLetter,
    Execution,
    Firing,
    Outcome,
    Schedule,
    ScheduleState,
)
from clockwork_svc.domain.tenant import Tenant, TenantDefaults, TenantLimits

Row = dict[str, Any]

INDEX_PARTS = 16
"""Partitions per tenant in `schedule_index`; changing it needs a migration."""

SCHEDULE_COLUMNS = (
    "tenant, key, id, spec, payload, state, version, created_ms, updated_ms, shard, "
    "next_fire_ms, last_fire_ms, last_outcome, fired_count, completed_version, completed_ms"
)
FIRING_COLUMNS = (
    "shard, fire_at_ms, firing_id, tenant, schedule_key, schedule_id, version, seq, "
    "occurrence_ms, attempt, delivery_id, done, redrive, ordering_key"
)
DEAD_LETTER_COLUMNS = (
    "tenant, schedule_key, schedule_id, firing_id, delivery_id, shard, seq, occurrence_ms, "
    "attempts, dead_ms, last_status, last_error, redriven_ms"
)
DAY_MS = 86_400_000
EXECUTION_COLUMNS = (
    "tenant, schedule_key, firing_id, delivery_id, attempt, occurrence_ms, due_ms, "
    "started_ms, duration_ms, outcome, status_code, error, next_attempt_ms"
)


def index_part(key: str) -> int:
    """Stable across processes and Python versions (unlike `hash()`)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % INDEX_PARTS


def is_schedule(row: Row | None) -> TypeGuard[Row]:
    """`record_progress` may leave a partial row (no id) for a missing schedule."""
    return row is not None and row.get("id") is not None


def is_firing(row: Row) -> bool:
    """`mark_done` of an unknown firing may leave a row holding only `done`."""
    return row.get("tenant") is not None


def schedule(row: Row) -> Schedule:
    stored = _stored_schedule(row)
    completed = row.get("completed_version")
    if stored.state is ScheduleState.ACTIVE and completed == stored.version:
        # Marked completed by a worker (`complete_schedule`) at this very version.
        return dataclasses.replace(
            stored,
            state=ScheduleState.COMPLETED,
            next_fire_ms=None,
            updated_ms=max(stored.updated_ms, row.get("completed_ms") or 0),
        )
    return stored


def _stored_schedule(row: Row) -> Schedule:
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
    )


def firing(row: Row) -> Firing:
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
    )


def execution(row: Row) -> Execution:
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
    )


TENANT_COLUMNS = (
    "name, created_ms, updated_ms, version, signing_secrets, token_hashes, limits, defaults"
)


def tenant_params(t: Tenant) -> tuple[Any, ...]:
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


def tenant(row: Row) -> Tenant:
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


def dead_letter(row: Row) -> DeadLetter:
    return DeadLetter(
        **{name.strip(): row[name.strip()] for name in DEAD_LETTER_COLUMNS.split(",")}
    )
