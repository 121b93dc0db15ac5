"""Clock jump on one worker (libfaketime), forward and backward.

Two workers, lease TTL 4 s. Worker 1 runs with libfaketime preloaded
(`FAKETIME_TIMESTAMP_FILE`, re-read every second): the test steps its wall clock
(CLOCK_REALTIME, Python's `time.time()`) while it runs, by rewriting the file.
Monotonic clocks stay real (`FAKETIME_DONT_FAKE_MONOTONIC=1`), and so do the API's and
the other worker's clocks.

What a jump does (read from the code, checked by these tests):

- Leases should be unaffected (yet see below): the lease guard and the event loop use
  the monotonic clock.
  (Were the monotonic clock faked too, a backward step would make the guard believe
  its lease lasts longer than etcd does, i.e. dispatch after etcd expired it, and a
  forward step would expire the guard at once and drop every shard; fencing by the
  store's epoch would then be the only protection. That is why it is kept real.)
- **Forward by J**: the jumped worker believes firings are due J earlier. Its scan
  reads up to its own now + lookahead and its due queue releases a firing when its own
  clock reaches the due time, so firings of its shards are delivered **early, by at
  most J** (lag >= -J). The misfire rule sees recurring schedules as behind and
  skips occurrences (FIRE_LATEST; counted as skipped, not lost).
- **Backward by J**: it believes firings are due J later: firings of its shards are
  delivered **late, by at most J** (plus the usual lag); nothing is lost (the cursor
  only moves when its clock passes it again).

**What was measured instead (2026-11, 2 cores): both promises are broken today**, so
both tests are marked xfail (not strict: the failures depend on timing) until fixed:

- -8 s: duplicated 40 (firings delivered twice), another run passed cleanly;
  +2.5 s, within the settle window: lost 7, lost 2, and once lost 0 but duplicated
  51; +8 s: lost 41. The jumped worker
  also lost its lease once right after each step ("keepalive failed: TimeoutError()")
  and its shards moved. Causes not isolated; suspects: the Cassandra driver stamps
  writes with the client's wall clock (it logs "Clock skew detected"), and the settle
  bound described below;
- with `FAKETIME_NO_CACHE=1` the worker's gRPC threads read the clock so often that
  the process spent most of its time in the kernel and missed keepalives; the file
  is therefore re-read once a second (the step lands within a second).

A forward jump larger than the settle window (3 s) also breaks a documented assumption
("writers' clocks within a second or two of the workers'", docs/architecture.md): the
worker's sweep and cursor use its own `now - settle` as the time below which no new
firing can appear, so a firing created by the API (real clock) during the jump, due
within J - settle of its creation, on the jumped worker's shards, lies below the
sweep and the cursor and is never read. The forward test therefore jumps by less than
the settle window (and still creates schedules during the jump); a +8 s step lost 41.
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from e2e.checker import Report, Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_server
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import LEASE_TTL
from tests.support.processes import ClockworkProcess

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.nemesis]

CLIENT_TIMESTAMPS = pytest.mark.xfail(
    strict=False,
    reason="a worker's clock step loses or duplicates firings (measured; causes not "
    "isolated, see the module docstring)",
)


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        why = "libfaketime not installed (Debian package libfaketime)"
        if os.environ.get("CI") == "true" or os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return found[0]


class FakeClock:
    """The offset file libfaketime reads on every clock call of the faked process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.set(0)

    def set(self, offset_s: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+.3f}\n")
        tmp.replace(self.path)  # atomic: the reader never sees an empty file

    def env(self, lib: str) -> dict[str, str]:
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            # Re-read the file at most once a second. FAKETIME_NO_CACHE=1 re-reads it on
            # every clock call: gRPC's threads read the clock so often that the worker
            # then spends most of its time in the kernel and misses its keepalives.
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "DONT_FAKE_MONOTONIC": "1",  # the name older libfaketime releases read
        }


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Cluster, FakeClock]]:
    lib = libfaketime()
    c = Cluster(
        tmp_path,
        require_server("CLOCKWORK_CASSANDRA"),
        require_server("CLOCKWORK_ETCD"),
        lease_ttl=LEASE_TTL,
    )
    clock = FakeClock(tmp_path / "faketime.rc")
    try:
        await c.start(workers=1)
        faked = await ClockworkProcess(
            [
                "worker",
                "--lease-ttl",
                str(LEASE_TTL),
                "--allow-private-targets",
                "127.0.0.0/8",
                "--ops-listen",
                "127.0.0.1:0",
            ],
            tmp_path / "worker1-faketime.log",
            {**c.env, **clock.env(lib)},
        ).start()
        c.workers.append(faked)
        await c.wait_all_owned(2, 60)
        yield c, clock
    finally:
        await c.stop()


async def run_jump(
    cluster: Cluster, clock: FakeClock, sink: RecordingSink, jump_s: float, seed: int
) -> tuple[Report, Window, list[int]]:
    """Workload over 20 s; the jump at +5 s, kept to the end; more schedules created
    during the jump. Returns the report, the window and the lags of the firings due
    after the jump (ms)."""
    t0 = now_ms()
    end = t0 + 22_000
    workload = Workload(seed=seed, target=sink.url, prefix=f"jump{seed}")
    async with cluster.client() as client:
        await workload.create(client, workload.generate(160, t0 + 2_000, end))
        await asyncio.sleep(max(0, t0 + 5_000 - now_ms()) / 1000)
        jumped_ms = now_ms()
        clock.set(jump_s)
        await asyncio.sleep(1.0)
        # Created during the jump, due soon after creation (the settle window's case).
        during = [workload.make("once", now_ms() + 200, now_ms() + 6_000) for _ in range(60)]
        during += workload.generate(40, now_ms() + 500, end)
        await workload.create(client, during)
    window = Window(f"clock {jump_s:+.0f}s on worker1", jumped_ms, end)
    report = await settle(cluster, workload, sink, end, [window])
    firings = workload.expectations(end).firings
    first: dict[str, int] = {}
    for r in sink.received:
        first.setdefault(r.delivery_id, r.received_ms)
    lags = [
        first[d] - f.due_ms
        for d, f in firings.items()
        if d in first and f.due_ms >= jumped_ms + 500
    ]
    return report, window, lags


@CLIENT_TIMESTAMPS
@pytest.mark.parametrize("jump_s", [2.5])
async def test_forward_jump_delivers_early_by_at_most_the_jump(
    cluster: tuple[Cluster, FakeClock], sink: RecordingSink, jump_s: float
) -> None:
    c, clock = cluster
    report, _, lags = await run_jump(c, clock, sink, jump_s, seed=51)
    early = [lag for lag in lags if lag < -100]
    print(
        f"\nforward {jump_s}s: {len(early)} of {len(lags)} firings due after the jump "
        f"delivered early, earliest {min(lags)} ms"
    )
    assert_report(f"clock +{jump_s}s on one worker", report, c, duplicates=False)
    assert early, "the jump had no effect (libfaketime not in use?)"
    assert min(lags) >= -jump_s * 1000 - 100, min(lags)


@CLIENT_TIMESTAMPS
@pytest.mark.parametrize("jump_s", [-8.0])
async def test_backward_jump_delays_by_at_most_the_jump(
    cluster: tuple[Cluster, FakeClock], sink: RecordingSink, jump_s: float
) -> None:
    c, clock = cluster
    report, _, lags = await run_jump(c, clock, sink, jump_s, seed=52)
    late = [lag for lag in lags if lag > -jump_s * 1000 / 2]
    print(
        f"\nbackward {jump_s}s: {len(late)} of {len(lags)} firings due after the jump "
        f"delivered more than {-jump_s / 2:.0f}s late, latest {max(lags)} ms"
    )
    assert_report(f"clock {jump_s}s on one worker", report, c, duplicates=False)
    assert late, "the jump had no effect (libfaketime not in use?)"
    assert max(lags) <= -jump_s * 1000 + 1_500, max(lags)
