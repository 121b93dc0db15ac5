"""A sink outage longer than the retry window: the receiver answers 503, then resets
connections, then hangs, for longer than a short retry policy lasts. Every firing ends
delivered (a later attempt after the outage) or dead-lettered; none is lost.

Duplicates are allowed: the sink never answers 2xx during the outage, but an attempt
sent just before the heal can be answered 2xx after the worker's 1 s timeout has
ended it (the sink runs in the test's own process, which on a loaded machine answers
late), and the worker then sends it again under the same delivery id: at least once,
as designed (docs/reliability.md)."""

from __future__ import annotations

import asyncio

import pytest

from clockwork_svc.domain.spec import RetryKind, RetryPolicy
from e2e.checker import Window
from e2e.cluster import now_ms, settle
from e2e.sink import Received, RecordingSink
from e2e.workload import Workload
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import MakeCluster

pytestmark = [
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.nemesis,
    pytest.mark.on_clusters,
]

# Three attempts 500 ms apart: the retry window is about a second (plus the 1 s timeout
# of a hung attempt), much shorter than the 6 s outage.
RETRY = RetryPolicy(RetryKind.FIXED, max_attempts=3, initial_delay_ms=500)


async def test_sink_outage_longer_than_the_retry_window(
    make_cluster: MakeCluster, sink: RecordingSink
) -> None:
    cluster = await make_cluster(workers=2)
    t0 = now_ms()
    workload = Workload(seed=51, target=sink.url, prefix="sink", retry=RETRY, timeout_ms=1_000)
    planned = workload.generate(250, t0 + 2_000, t0 + 14_000)
    async with cluster.client() as client:
        await workload.create(client, planned)
    await asyncio.sleep(max(0, t0 + 4_000 - now_ms()) / 1000)
    start = now_ms()
    sink.fail_with(503)
    await asyncio.sleep(2)
    sink.reset()
    await asyncio.sleep(2)
    sink.hang()
    await asyncio.sleep(2)
    sink.heal()
    window = Window("sink 503/reset/hang 6s", start, now_ms())
    report = await settle(cluster, workload, sink, t0 + 14_000, [window])
    assert_report("sink outage", report, cluster, duplicates=True)
    # The outage outlasted the retries of the firings due early in it...
    assert report.dead_lettered > 0
    # ...and every dead letter is one the outage caused: due before it healed, and every
    # attempt the sink saw of it arrived during the outage and failed. (Not "due just
    # before the outage": on a loaded machine firings due well before it are attempted
    # in it.)
    async with cluster.client() as client:
        letters = (await client.dead_letters(page_size=1000)).items
    attempts: dict[str, list[Received]] = {}
    for r in sink.received:
        attempts.setdefault(r.delivery_id, []).append(r)
    for d in letters:
        seen = attempts.get(d.delivery_id, [])
        assert d.occurrence_ms < window.end_ms, d
        assert seen, f"dead-lettered, never seen by the sink: {d}"
        assert all(not r.ok and start <= r.received_ms <= window.end_ms for r in seen), (d, seen)
    failed_statuses = {r.status for r in sink.received if not r.ok}
    assert {503, -1, 0} <= failed_statuses, failed_statuses
