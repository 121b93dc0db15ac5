"""Test the test: with fencing switched off, the checker must catch the stale owner.

Scenario (the SIGSTOP-past-the-lease nemesis, arranged so that its effect is certain):
two workers, lease TTL 4 s. Worker 0 is paused (SIGSTOP) at a moment P when nothing is
in flight (no firing is due in [P - 1 s, P + 0.5 s)) but its due queue holds prefetched
one-shots due in [P + 0.5 s, P + 1.7 s) (the scan looks 2 s ahead). It stays stopped for
7 s: its lease expires, worker 1 takes its shards over and delivers those one-shots,
late. Then worker 0 is resumed (SIGCONT) with the same one-shots still in its queue,
now overdue.

- **Fencing on** (the product as shipped): on resume, the dispatch gate compares the
  lease deadline with the monotonic clock (which kept running while the process was
  stopped), finds it passed and drops every queued firing; the coordinator drops the
  shards; a scanner that still writes its cursor is refused by the store (its epoch is
  stale). The checker sees lost = 0 and duplicated = 0.
- **Fencing off** (`CLOCKWORK_UNSAFE_DISABLE_FENCING_FOR_TESTS=1`, read once in
  clockwork_svc/settings.py, applied in clockwork_svc/app.py, which logs a warning at
  start-up): the worker (a) dispatches without looking at its lease deadline, (b) keeps
  its shards when its lease is lost (only the next session's rebalance, at least 0.5 s
  later, releases them) and (c) ignores the store's epoch fence (a refused cursor
  write is re-issued under the stored epoch and counts as accepted). The resumed worker
  then re-delivers the one-shots worker 1 already delivered: the checker must report
  duplicates (the test repeats the pause up to three times until it does).

Why all three: this design fences a stale owner in two layers. The store's epoch (c)
alone is *not* what stops a resumed process: a cursor write is checked at most once a
second and does not guard a delivery; what stops it at once is the local half, the
lease deadline checked before every dispatch (a) together with dropping the shards on
lease loss (b). Switching off only (c) therefore changes nothing the checker could see
under this nemesis (the zombie is gated before its first cursor write), so the switch
removes every layer: the "broken" build is a worker that keeps acting on shards it no
longer owns, which is exactly the failure fencing exists to prevent, and the checker
must notice it. The stale cursor writes that were applied are counted from the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.settings import UNSAFE_DISABLE_FENCING_ENV, ProcessSettings
from clockwork_svc.storage.sqlite import SqliteStore
from clockwork_svc.testing.fencing_off import UnfencedStore
from e2e.checker import Report, Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_stores
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import LEASE_TTL

pytestmark = pytest.mark.on_clusters

UNSAFE_ENV = "CLOCKWORK_UNSAFE_DISABLE_FENCING_FOR_TESTS"
PAUSE_S = LEASE_TTL + 3
ROUNDS = 3

StartCluster = Callable[[bool], Awaitable[Cluster]]


@pytest.fixture
async def start_cluster(tmp_path: Path) -> AsyncIterator[StartCluster]:
    """`await start_cluster(unsafe)`: two workers, fencing off in every process if
    `unsafe` (only the paused worker's setting matters)."""
    made: list[Cluster] = []

    async def start(unsafe: bool) -> Cluster:
        cluster = Cluster(
            tmp_path,
            *require_stores(),
            lease_ttl=LEASE_TTL,
        )
        if unsafe:
            cluster.env[UNSAFE_ENV] = "1"
        made.append(cluster)
        await cluster.start(workers=2)
        return cluster

    yield start
    for cluster in made:
        await cluster.stop()


async def pause_round(
    cluster: Cluster, sink: RecordingSink, workload: Workload
) -> tuple[Report, Window, set[str]]:
    """One SIGSTOP-past-the-lease round; returns the report (over every round so far),
    the pause window and the delivery ids of the one-shots queued at the pause."""
    t0 = now_ms()
    pause_at = t0 + 5_000
    resume_at = pause_at + PAUSE_S * 1000
    end = resume_at + 3_000
    planned = workload.generate(60, t0 + 2_000, pause_at - 1_000, kinds=["once"])
    queued = [workload.make("once", pause_at + 500, pause_at + 1_700) for _ in range(40)]
    planned += queued
    planned += workload.generate(60, pause_at + 500, end)
    async with cluster.client() as client:
        await workload.create(client, planned)
    assert now_ms() < pause_at - 500, "creating the workload took too long"
    await asyncio.sleep((pause_at - now_ms()) / 1000)
    window = await cluster.pause_worker(0, PAUSE_S)
    report = await settle(cluster, workload, sink, end, [window])
    queued_ids = {
        f.delivery_id
        for f in workload.expectations(end).firings.values()
        if f.key in {p.key for p in queued}
    }
    return report, window, queued_ids


@pytest.mark.parametrize(("value", "on"), [(None, False), ("0", False), ("1", True)])
def test_the_switch_is_read_from_the_environment_only_when_1(
    monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool
) -> None:
    assert UNSAFE_DISABLE_FENCING_ENV == UNSAFE_ENV
    if value is None:
        monkeypatch.delenv(UNSAFE_ENV, raising=False)
    else:
        monkeypatch.setenv(UNSAFE_ENV, value)
    assert ProcessSettings().unsafe_disable_fencing_for_tests is on


async def test_unfenced_store_applies_a_stale_cursor_write(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "db.sqlite", ClusterLayout(4, 60_000, 1_000))
    try:
        assert await store.acquire_shard(0, epoch=5) is not None
        assert await store.acquire_shard(0, epoch=9) is not None  # a newer owner
        assert not await store.advance_cursor(0, 2_000, epoch=5)  # fenced, as shipped
        unfenced = UnfencedStore(store)
        assert await unfenced.advance_cursor(0, 3_000, epoch=5)  # the fence is off
        cursor = await store.load_cursor(0)
        assert cursor is not None and (cursor.position_ms, cursor.epoch) == (3_000, 9)
        stale = await unfenced.acquire_shard(0, epoch=5)
        assert stale is not None and (stale.position_ms, stale.epoch) == (3_000, 5)
    finally:
        await store.close()


@pytest.mark.cassandra
@pytest.mark.slow
@pytest.mark.nemesis
async def test_fencing_off_the_checker_catches_the_stale_owner(
    start_cluster: StartCluster, sink: RecordingSink
) -> None:
    cluster = await start_cluster(True)
    assert "UNSAFE: fencing is DISABLED" in cluster.workers[0].log()
    workload = Workload(seed=71, target=sink.url, prefix="unfenced")
    for round_no in range(1, ROUNDS + 1):
        report, _, queued = await pause_round(cluster, sink, workload)
        print(f"\n[fencing OFF, round {round_no}] {report.summary()}\n{report.table()}")
        if report.duplicated or report.lost:
            break
    stale_writes = cluster.workers[0].log().count("UNSAFE: stale cursor write applied")
    kept = cluster.workers[0].log().count("UNSAFE: lease in doubt, keeping")
    from_queue = len(set(report.duplicated) & queued)
    print(
        f"fencing OFF: checker found duplicated={report.duplicates} lost={len(report.lost)} "
        f"after {round_no} round(s); duplicates of firings queued at the pause: "
        f"{from_queue}/{len(queued)}; stale cursor writes applied: {stale_writes}; "
        f"lease losses ignored: {kept}"
    )
    # The checker catches the broken build: the resumed stale owner delivered again what
    # the new owner had delivered.
    assert report.duplicated or report.lost, cluster.logs()
    assert kept >= 1, cluster.logs()


@pytest.mark.cassandra
@pytest.mark.slow
@pytest.mark.nemesis
async def test_fencing_on_the_same_scenario_passes(
    start_cluster: StartCluster, sink: RecordingSink
) -> None:
    cluster = await start_cluster(False)
    assert "UNSAFE" not in cluster.workers[0].log()
    workload = Workload(seed=71, target=sink.url, prefix="fenced")
    report, window, queued = await pause_round(cluster, sink, workload)
    assert_report("fencing ON, SIGSTOP past the lease", report, cluster, duplicates=False)
    print(
        f"fencing ON: {len(queued)} firings queued at the pause, "
        f"window {(window.end_ms - window.start_ms) / 1000:.1f}s"
    )
    assert "UNSAFE" not in cluster.workers[0].log()
