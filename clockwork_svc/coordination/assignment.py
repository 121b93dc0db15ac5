"""Which shards a worker should own: a pure function of the cluster view.

Every worker computes the same fair targets from the same sorted list of live workers
(shard_count // workers each, the first shard_count % workers of them one more), so
the targets add up to the shard count and the cluster converges without a leader.
Within its target a worker prefers the shards that rendezvous hashing ranks highest
for it, so a worker that restarts tends to get its old shards back and a join moves
as few shards as possible.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    acquire: tuple[int, ...]
    release: tuple[int, ...]


def fair_target(me: str, workers: Sequence[str], shard_count: int) -> int:
    ordered = sorted(set(workers) | {me})
    base, extra = divmod(shard_count, len(ordered))
    return base + (1 if ordered.index(me) < extra else 0)


def affinity(worker: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{worker}\x1f{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def plan(
    me: str,
    workers: Sequence[str],
    owners: Mapping[int, str],
    shard_count: int,
    max_moves: int = 0,
) -> Plan:
    """Shards to acquire (free ones) and to release (excess ones) this round.

    `owners` maps owned shards to their owner; a shard missing from it is free.
    `max_moves` > 0 bounds acquisitions per round, spreading a rebalance out.
    """
    target = fair_target(me, workers, shard_count)
    mine = sorted((s for s, owner in owners.items() if owner == me), key=lambda s: affinity(me, s))
    if len(mine) > target:
        return Plan((), tuple(sorted(mine[: len(mine) - target])))
    free = [s for s in range(shard_count) if s not in owners]
    free.sort(key=lambda s: affinity(me, s), reverse=True)
    wanted = target - len(mine)
    if max_moves:
        wanted = min(wanted, max_moves)
    return Plan(tuple(sorted(free[:wanted])), ())
