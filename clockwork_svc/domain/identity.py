"""Stable identities: shards, buckets, firing ids and delivery ids.

Every function here is deterministic, so that a write repeated after a crash or a
client retry lands on the same row instead of creating a duplicate.
"""

from __future__ import annotations

import hashlib


def _digest(*parts: str | int, size: int = 16) -> bytes:
    h = hashlib.blake2b(digest_size=size)
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\x1f")
    return h.digest()


def shard_of(tenant: str, routing_key: str, shard_count: int) -> int:
    """The shard of a schedule: a stable hash of (tenant, ordering key or schedule key)."""
    return int.from_bytes(_digest(tenant, routing_key, size=8), "big") % shard_count


def bucket_of(fire_at_ms: int, bucket_ms: int) -> int:
    """The time bucket (partition) holding firings due at `fire_at_ms`."""
    return fire_at_ms // bucket_ms


def firing_id(
    schedule_id: str,
    version: int,
    occurrence_ms: int,
    attempt: int,
    redrive: int = 0,
    triggered: bool = False,
) -> str:
    if triggered:
        return _digest(schedule_id, version, occurrence_ms, attempt, "trigger", redrive).hex()
    if redrive:
        return _digest(schedule_id, version, occurrence_ms, attempt, "redrive", redrive).hex()
    return _digest(schedule_id, version, occurrence_ms, attempt).hex()


def delivery_id(schedule_id: str, occurrence_ms: int, triggered: bool = False) -> str:
    """The id receivers deduplicate on (the `webhook-id` header).

    The same for every attempt of one occurrence, and for an occurrence rewritten
    after a pause or an update, so a receiver never sees one occurrence twice
    under different ids. A triggered run (trigger-now) has one of its own, never an
    occurrence's even at the same millisecond.
    """
    if triggered:
        return "msg_" + _digest(schedule_id, occurrence_ms, "trigger", size=12).hex()
    return "msg_" + _digest(schedule_id, occurrence_ms, size=12).hex()


def jitter_offset_ms(delivery: str, jitter_ms: int) -> int:
    """A deterministic offset in [0, jitter_ms) derived from the delivery id."""
    if jitter_ms <= 0:
        return 0
    return int.from_bytes(_digest(delivery, "jitter", size=8), "big") % jitter_ms
