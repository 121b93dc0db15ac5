"""Leader election logic against an in-memory Lease with the API server's optimistic
concurrency (a write with a stale resourceVersion loses). The real Lease is exercised
by the Kubernetes e2e test (the autoscaler only scales while it leads)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from clockwork_operator.kube import LeaseRecord
from clockwork_operator.leader import LeaderElection


class MemoryLeases:
    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0

    async def read_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        return self.record

    async def write_lease(
        self,
        namespace: str,
        name: str,
        holder: str,
        duration_s: int,
        previous: LeaseRecord | None,
        acquired: bool,
    ) -> bool:
        current = self.record.resource_version if self.record else None
        if (previous.resource_version if previous else None) != current:
            return False  # 409: someone wrote since we read
        self.version += 1
        transitions = (previous.transitions if previous else 0) + int(acquired)
        now = datetime.now(UTC)
        self.record = LeaseRecord(holder, now, duration_s, str(self.version), transitions)
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def election(leases: MemoryLeases, who: str, clock: Clock) -> LeaderElection:
    kube: Any = leases
    return LeaderElection(kube, "ns", "lease", who, duration_s=15, monotonic=clock)


async def test_first_comer_leads_and_the_other_waits() -> None:
    leases, clock = MemoryLeases(), Clock()
    a, b = election(leases, "a", clock), election(leases, "b", clock)
    assert await a.attempt() and a.is_leader
    assert not await b.attempt() and not b.is_leader
    assert await a.attempt()  # renewal
    assert leases.record is not None and leases.record.transitions == 1


async def test_leadership_lapses_locally_before_the_lease_expires() -> None:
    leases, clock = MemoryLeases(), Clock()
    a = election(leases, "a", clock)
    await a.attempt()
    clock.now += 11  # duration 15, margin 3: valid for 12 s after the renewal was sent
    assert a.is_leader
    clock.now += 2
    assert not a.is_leader


async def test_expired_lease_is_taken_over() -> None:
    leases, clock = MemoryLeases(), Clock()
    a, b = election(leases, "a", clock), election(leases, "b", clock)
    await a.attempt()
    assert leases.record is not None
    leases.record = replace(leases.record, renew_time=datetime.now(UTC) - timedelta(seconds=16))
    assert await b.attempt() and b.is_leader
    assert leases.record.holder == "b" and leases.record.transitions == 2
    assert not await a.attempt() and not a.is_leader


async def test_losing_a_write_race_means_not_leader() -> None:
    leases, clock = MemoryLeases(), Clock()
    a = election(leases, "a", clock)
    await a.attempt()
    original = leases.write_lease

    async def racing(*args: Any) -> bool:
        leases.version += 1  # another writer got in between read and write
        leases.record = replace(leases.record, resource_version=str(leases.version))  # type: ignore[type-var]
        return await original(*args)

    leases.write_lease = racing  # type: ignore[method-assign,assignment]
    assert not await a.attempt() and not a.is_leader
