"""What the benchmarked stores do with an acknowledged write, so every scheduler in a
comparison runs at the same durability.

Cassandra's `commitlog_sync` decides it for Clockwork: `batch` (the test harness's
default) syncs the commit log before it acknowledges a write, so a crash loses
nothing acknowledged; `periodic` (Cassandra's own default, and what multi-node
deployments run: a write is acknowledged by replicas, not a disk) syncs every
`commitlog_sync_period`. The Celery peer's Redis gets the matching `appendfsync`
(`always` or `everysec`); with neither AOF nor snapshots, a Redis restart would lose
every scheduled task, which no peer is allowed here. APScheduler's SQLite job store
keeps its default (`synchronous=FULL`: every commit is synced).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from clockwork_svc.storage.cassandra import connecting
from e2e.stores import CassandraAccess

_QUERY = (
    "SELECT name, value FROM system_views.settings "
    "WHERE name IN ('commitlog_sync', 'commitlog_sync_period')"
)


@dataclass(frozen=True, slots=True)
class Durability:
    commitlog_sync: str  # Cassandra's: batch, group or periodic
    commitlog_sync_period: str  # e.g. "10000ms" (periodic only)

    @property
    def redis_appendfsync(self) -> str:
        """Redis's AOF policy at the same durability: a synced log before the
        acknowledgement (`always`), or a sync at most a second later (`everysec`)."""
        return "everysec" if self.commitlog_sync == "periodic" else "always"

    def cassandra(self) -> str:
        period = f" ({self.commitlog_sync_period})" if self.commitlog_sync == "periodic" else ""
        return f"Cassandra commitlog_sync={self.commitlog_sync}{period}"

    def describe(self) -> str:
        """Every peer's setting, for bench.peers."""
        return (
            f"{self.cassandra()}; Redis appendonly yes, appendfsync "
            f"{self.redis_appendfsync}; SQLite synchronous=FULL"
        )


async def of_cassandra(access: CassandraAccess) -> Durability:
    """Ask the running node (its `system_views.settings` virtual table)."""
    cluster, session = await connecting.connect(
        access.contact_points, timeout_s=60, **access.connect_kwargs()
    )
    try:
        rows = await asyncio.to_thread(session.execute, _QUERY)
        settings = {row["name"]: row["value"] for row in rows}
    finally:
        await connecting.shutdown(cluster)
    if "commitlog_sync" not in settings:
        raise RuntimeError(f"Cassandra at {access.address} does not report commitlog_sync")
    return Durability(settings["commitlog_sync"], settings.get("commitlog_sync_period", ""))
