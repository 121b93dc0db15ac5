"""Shard ownership through a real etcd: balance, hand-over, crash takeover, fencing.

Workers run in this process (so the test can crash one by cancelling its tasks
without releasing anything) and share one SQLite store, which carries the epochs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from clockwork_svc.abc import Store, SystemClock
from clockwork_svc.coordination.etcd import EtcdCoordinator, EtcdLoadReader, cluster_status
from clockwork_svc.domain.load import ScaleDecision
from clockwork_svc.domain.model import ClusterLayout, DeliveryResult, Firing
from clockwork_svc.domain.spec import Target
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.settings import EtcdSettings
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.worker.worker import Worker, WorkerSettings
from tests.conftest import require_server

SHARDS = 12
TTL = 3


class NullSink:
    async def deliver(
        self,
        target: Target,
        payload: bytes,
        firing: Firing,
        timestamp_s: int,
        signing_secrets: Sequence[str] = (),
        key: str = "",
        traceparent: str = "",
    ) -> DeliveryResult:
        return DeliveryResult(True, False, 200)

    async def close(self) -> None:
        return None


@dataclass
class Member:
    worker: Worker
    coordinator: EtcdCoordinator
    task: asyncio.Task[None]
    metrics: Metrics

    async def crash(self) -> None:
        """Vanish without releasing anything (like kill -9): the lease must expire."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.worker.stop()

    async def stop(self) -> None:
        await self.coordinator.stop()
        await asyncio.wait_for(self.task, 15)
        await self.worker.stop()


@pytest.fixture
async def cluster_env(tmp_path: Path) -> AsyncIterator[tuple[str, str, SqliteStore]]:
    endpoint = require_server("CLOCKWORK_ETCD")
    layout = ClusterLayout(SHARDS, 60_000, int(time.time() * 1000))
    store = await SqliteStore.open(tmp_path / "shared.db", layout)
    yield endpoint, "test-" + uuid.uuid4().hex[:8], store
    await store.close()


async def join(endpoint: str, cluster: str, store: SqliteStore, name: str) -> Member:
    settings = EtcdSettings(
        endpoint=endpoint,
        cluster=cluster,
        lease_ttl_s=TTL,
        safety_margin_s=0.75,
        rebalance_interval_s=0.5,
        load_report_interval_s=0.3,
        worker_id=name,
    )
    return await start_member(store, settings)


async def start_member(store: Store, settings: EtcdSettings) -> Member:
    """A worker on `store` and its coordinator, wired as `clockwork worker` wires them."""
    clock = SystemClock()
    layout = await store.layout()
    holder: dict[str, EtcdCoordinator] = {}
    metrics = Metrics()
    worker = Worker(
        store,
        NullSink(),
        clock,
        layout,
        WorkerSettings(),
        metrics,
        may_dispatch=lambda: holder["c"].may_dispatch(),
    )
    worker.start()
    coordinator = EtcdCoordinator(
        settings,
        worker,
        layout.shard_count,
        clock,
        load=lambda wid: worker.load_report(wid, 2.0),
    )
    holder["c"] = coordinator
    task = asyncio.create_task(coordinator.run(), name=f"coordinator-{settings.worker_id}")
    return Member(worker, coordinator, task, metrics)


async def wait_until(predicate: object, timeout_s: float) -> float:
    """Seconds until predicate() holds; fails after timeout_s."""
    started = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def owned(*members: Member) -> list[int]:
    return sorted(s for m in members for s in m.worker.owned_shards)


async def test_workers_share_shards_evenly_with_increasing_epochs(
    cluster_env: tuple[str, str, SqliteStore],
) -> None:
    endpoint, name, store = cluster_env
    a = await join(endpoint, name, store, "a")
    await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, 10)
    first_epochs = dict(a.worker.owned_shards)
    b = await join(endpoint, name, store, "b")
    c = await join(endpoint, name, store, "c")
    try:
        await wait_until(
            lambda: (
                sorted(len(m.worker.owned_shards) for m in (a, b, c)) == [4, 4, 4]
                and owned(a, b, c) == list(range(SHARDS))
            ),
            15,
        )
        view = await cluster_status(endpoint, name)
        assert set(view.workers) == {"a", "b", "c"} and view.shard_count == SHARDS
        for member in (b, c):
            for shard, epoch in member.worker.owned_shards.items():
                assert epoch > first_epochs[shard]  # a moved shard gets a newer epoch
                cursor = await store.load_cursor(shard)
                assert cursor is not None and cursor.epoch == epoch
    finally:
        for m in (a, b, c):
            await m.stop()


async def test_graceful_stop_hands_shards_over(cluster_env: tuple[str, str, SqliteStore]) -> None:
    endpoint, name, store = cluster_env
    a = await join(endpoint, name, store, "a")
    b = await join(endpoint, name, store, "b")
    try:
        await wait_until(
            lambda: (
                owned(a, b) == list(range(SHARDS)) and len(b.worker.owned_shards) == SHARDS // 2
            ),
            15,
        )
        await b.stop()
        took = await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, 10)
        assert took < 5
    finally:
        await a.stop()


async def test_a_graceful_stop_whose_release_fails_still_hands_over_before_the_lease(
    cluster_env: tuple[str, str, SqliteStore],
) -> None:
    """An etcd error while a stopping worker releases its shards: its lease is still
    revoked, which deletes its keys, so the others take over at once instead of when
    the lease expires."""
    endpoint, name, store = cluster_env
    a = await join(endpoint, name, store, "a")
    b = await join(endpoint, name, store, "b")

    async def failing_release(client: object) -> None:
        raise OSError("injected: etcd unreachable while releasing")

    try:
        await wait_until(
            lambda: (
                owned(a, b) == list(range(SHARDS)) and len(b.worker.owned_shards) == SHARDS // 2
            ),
            15,
        )
        b.coordinator._release_everything = failing_release  # type: ignore[method-assign]
        await b.stop()
        took = await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, TTL + 5)
        # The lease would have taken TTL (3 s) from b's last keepalive; a's rebalance
        # rounds come every 0.5 s.
        assert took < TTL - 1, took
        view = await cluster_status(endpoint, name)
        assert set(view.workers) == {"a"}
    finally:
        await a.stop()


async def test_crashed_worker_shards_are_taken_over_after_its_lease(
    cluster_env: tuple[str, str, SqliteStore],
) -> None:
    endpoint, name, store = cluster_env
    a = await join(endpoint, name, store, "a")
    b = await join(endpoint, name, store, "b")
    try:
        await wait_until(
            lambda: (
                owned(a, b) == list(range(SHARDS)) and len(b.worker.owned_shards) == SHARDS // 2
            ),
            15,
        )
        lost = dict(b.worker.owned_shards)
        await b.crash()
        took = await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, TTL + 5)
        assert took <= TTL + 2, took
        for shard, old_epoch in lost.items():
            assert a.worker.owned_shards[shard] > old_epoch
            # The crashed owner's epoch can no longer advance the shard.
            assert not await store.advance_cursor(shard, int(time.time() * 1000), old_epoch)
    finally:
        await a.stop()


async def test_stale_owner_drops_a_fenced_shard(cluster_env: tuple[str, str, SqliteStore]) -> None:
    endpoint, name, store = cluster_env
    a = await join(endpoint, name, store, "a")
    try:
        await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, 10)
        shard, epoch = next(iter(a.worker.owned_shards.items()))
        # Someone with a newer epoch writes the shard (as after a takeover a paused
        # worker never noticed): the scanner's next cursor write is rejected.
        assert await store.acquire_shard(shard, epoch + 1) is not None
        # Noticed at the next cursor write or idle epoch check (every 3 s).
        await wait_until(lambda: a.worker.owned_shards.get(shard) != epoch, 6)
        assert a.metrics.registry.get_sample_value("clockwork_shard_fenced_total") == 1
        # It gives the key up and takes the shard again under a newer etcd revision.
        await wait_until(lambda: a.worker.owned_shards.get(shard, 0) > epoch + 1, 10)
    finally:
        await a.stop()


async def test_etcd_outage_stops_dispatch_and_recovers(
    cluster_env: tuple[str, str, SqliteStore],
) -> None:
    from e2e.infra import etcd as etcd_server

    endpoint, name, store = cluster_env
    running = etcd_server.attach()
    if running is None or running.address != endpoint:
        pytest.skip("etcd not managed by this checkout's harness")
    a = await join(endpoint, name, store, "a")
    try:
        await wait_until(lambda: len(a.worker.owned_shards) == SHARDS, 10)
        assert a.coordinator.may_dispatch()
        await asyncio.to_thread(running.kill)
        # Without keepalive answers the worker stops dispatching before the TTL ends.
        stopped = await wait_until(lambda: not a.coordinator.may_dispatch(), TTL + 1)
        assert stopped < TTL
        await asyncio.to_thread(running.restart)
        await wait_until(
            lambda: a.coordinator.may_dispatch() and len(a.worker.owned_shards) == SHARDS, 20
        )
    finally:
        await a.stop()


async def test_load_reports_follow_the_live_workers(
    cluster_env: tuple[str, str, SqliteStore],
) -> None:
    endpoint, cluster, store = cluster_env
    reader = EtcdLoadReader(EtcdSettings(endpoint=endpoint, cluster=cluster), SHARDS)
    a = await join(endpoint, cluster, store, "a")
    b = await join(endpoint, cluster, store, "b")
    try:
        reports: dict[str, int] = {}

        async def both_reported() -> bool:
            load = await reader.cluster_load()
            reports.clear()
            reports.update({w.worker_id: w.shards for w in load.workers})
            return sum(reports.values()) == SHARDS and load.shards_owned == SHARDS

        deadline = time.monotonic() + 15
        while not await both_reported():
            assert time.monotonic() < deadline, f"reports never covered all shards: {reports}"
            await asyncio.sleep(0.2)
        assert set(reports) == {"a", "b"}
        # The autoscaler's decision is kept beside the reports, and is not one of them.
        decision = ScaleDecision("cw/workers", 2, 3, "demand 40.0/s needs 3", 1_000, 1_000, "op")
        await reader.record_scale_decision(decision)
        load = await reader.cluster_load()
        assert load.scale_decision == decision
        assert sorted(w.worker_id for w in load.workers) == ["a", "b"]
        await a.crash()  # its report is on its lease: gone with it
        deadline = time.monotonic() + TTL + 10
        while True:
            load = await reader.cluster_load()
            if [w.worker_id for w in load.workers] == ["b"] and load.workers[0].shards == SHARDS:
                # Every shard's owner, with the epoch b holds it at.
                assert [o[0] for o in load.owners] == list(range(SHARDS))
                assert {o[1] for o in load.owners} == {"b"} and all(o[2] > 0 for o in load.owners)
                break
            assert time.monotonic() < deadline, f"stale reports: {load.workers}"
            await asyncio.sleep(0.2)
    finally:
        await b.stop()
        await reader.close()
