"""The Cassandra store's side of `storage/columns.py`: the columns only Cassandra has
(partition keys such as `bucket` and `day`, a firing's TTL, a worker's completion
mark), and the parameters of the statements that write them. The benchmarks that
write the store's rows directly bind these same parameters."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, TypeGuard

from clockwork_svc.domain.model import DeadLetter, Firing, Schedule, ScheduleState
from clockwork_svc.storage.columns import DEAD_LETTERS, FIRINGS, SCHEDULES

Row = Mapping[str, Any]

SCHEDULE_PARTS = 64
"""Partitions per tenant in `schedules_by_part`; changing it needs a migration."""

DAY_MS = 86_400_000
"""Width of a `dead_letters` partition (its `day` column)."""

SCHEDULE_SELECTED = f"{SCHEDULES.selected}, completed_version, completed_ms"
FIRING_INSERTED = f"bucket, {FIRINGS.names}"
DEAD_LETTER_INSERTED = f"day, {DEAD_LETTERS.names}"


def schedule_part(key: str) -> int:
    """The partition of a tenant's schedule; stable across processes and Python
    versions (unlike `hash()`)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SCHEDULE_PARTS


def schedule_key(tenant: str, key: str) -> tuple[str, int, str]:
    """The primary key of a schedule's row: `WHERE tenant = ? AND part = ? AND key = ?`."""
    return (tenant, schedule_part(key), key)


def insert_schedule_params(s: Schedule) -> tuple[Any, ...]:
    """The columns outside the key, then the key (an UPDATE ... IF id = null)."""
    values = SCHEDULES.encode(s)
    return (*SCHEDULES.pick(values, SCHEDULES.others), *schedule_key(s.tenant, s.key))


def firing_params(f: Firing, bucket: int, ttl_s: int) -> tuple[Any, ...]:
    """FIRING_INSERTED, then the TTL."""
    return (bucket, *FIRINGS.encode(f), ttl_s)


def dead_letter_params(d: DeadLetter) -> tuple[Any, ...]:
    """DEAD_LETTER_INSERTED."""
    return (d.dead_ms // DAY_MS, *DEAD_LETTERS.encode(d))


def is_schedule(row: Row | None) -> TypeGuard[Row]:
    """`record_firing` may leave a partial row (no id) for a missing schedule."""
    return row is not None and row.get("id") is not None


def is_firing(row: Row) -> bool:
    """`mark_done` of an unknown firing may leave a row holding only `done`."""
    return row.get("tenant") is not None


def schedule(row: Row) -> Schedule:
    """A row of SCHEDULE_SELECTED."""
    stored = SCHEDULES.decode(row)
    completed = row.get("completed_version")
    if stored.state is ScheduleState.ACTIVE and completed == stored.version:
        # Marked completed by a worker (`record_firing`) at this very version.
        return dataclasses.replace(
            stored,
            state=ScheduleState.COMPLETED,
            next_fire_ms=None,
            updated_ms=max(stored.updated_ms, row.get("completed_ms") or 0),
        )
    return stored
