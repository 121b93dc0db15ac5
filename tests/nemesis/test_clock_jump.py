"""Clock jump on one worker (libfaketime), forward and backward, beyond the settle window.

Two workers, lease TTL 4 s. Worker 1 runs with libfaketime preloaded
(`FAKETIME_TIMESTAMP_FILE`, re-read every second): the test steps its wall clock
(CLOCK_REALTIME, Python's `time.time()`) by 8 s while it runs, by rewriting the file.
Monotonic clocks stay real (`FAKETIME_DONT_FAKE_MONOTONIC=1`), and so do the API's and
the other worker's wall clocks.

Clockwork does not schedule by a host's wall clock but by cluster time
(`clockwork_svc/timekeeping.py`): the store's clock, sampled at start and every 30 s,
carried between samples by the monotonic clock; Cassandra write timestamps come from
it too. The promise checked here is therefore the strong one: a step of a worker's
wall clock changes nothing. No firing lost, none delivered twice, none early, none
late by the step, in either direction, by more than the settle window.

Without cluster time a forward step loses firings (the worker's sweep and cursor,
read off its own clock, pass behind rows the api has just written) and a backward
step delivers firings twice (the worker's "done" writes carry older timestamps
than the rows they should replace): the checks below catch both.

The test also checks that the step reached the worker: its
`clockwork_host_clock_skew_seconds` gauge reads the jump.
"""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from e2e.checker import Report, Window
from e2e.cluster import Cluster, now_ms, settle
from e2e.sink import RecordingSink
from e2e.workload import Workload
from tests.conftest import require_stores
from tests.nemesis.common import assert_report
from tests.nemesis.conftest import LEASE_TTL
from tests.support.processes import ClockworkProcess, free_port

pytestmark = [
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.nemesis,
    pytest.mark.on_clusters,
]

FAKETIME_SITE = Path(__file__).parent / "faketime_site"


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
        self.metrics_url = ""  # the faked worker's /metrics
        self.set(0)

    async def skew_seen_by_worker_s(self) -> float:
        """The faked worker's own reading: its wall clock minus cluster time."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.metrics_url) as response,
        ):
            text = await response.text()
        for line in text.splitlines():
            if line.startswith("clockwork_host_clock_skew_seconds "):
                return float(line.split()[1])
        raise AssertionError(f"no clockwork_host_clock_skew_seconds in {self.metrics_url}")

    async def wait_for_skew(self, offset_s: float, timeout_s: float = 10.0) -> float:
        """Wait until the worker reads a skew near `offset_s`; returns its last reading.
        libfaketime re-reads the offset file only every few seconds (measured: a
        change seen 1.5-3 s after it was written, with FAKETIME_CACHE_DURATION=1)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            skew_s = await self.skew_seen_by_worker_s()
            if abs(skew_s - offset_s) < 1.5 or asyncio.get_running_loop().time() > deadline:
                return skew_s
            await asyncio.sleep(0.2)

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
            # libfaketime's "monotonic fix" (on by default with glibc) breaks the timed
            # wait of CPython's GIL, and the faked worker then starves its own event
            # loop until its lease expires (test_the_faked_process_runs_threads_at_full_speed).
            # The fix concerns monotonic clocks libfaketime fakes; this one it leaves real.
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "DONT_FAKE_MONOTONIC": "1",  # the name older libfaketime releases read
            # time.sleep without the libfaketime defect (faketime_site/sitecustomize.py).
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(FAKETIME_SITE), os.environ.get("PYTHONPATH", "")) if p
            ),
        }


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Cluster, FakeClock]]:
    lib = libfaketime()
    c = Cluster(
        tmp_path,
        *require_stores(),
        lease_ttl=LEASE_TTL,
    )
    clock = FakeClock(tmp_path / "faketime.rc")
    ops_port = free_port()
    clock.metrics_url = f"http://127.0.0.1:{ops_port}/metrics"
    try:
        await c.start(workers=1)
        faked = await ClockworkProcess(
            c.worker_args(f"127.0.0.1:{ops_port}"),
            c.log_path("worker1-faketime.log"),
            {**c.env, **clock.env(lib)},
        ).start()
        c.workers.append(faked)
        await c.wait_all_owned(2, 60)
        yield c, clock
    finally:
        await c.stop()


async def run_jump(
    cluster: Cluster, clock: FakeClock, sink: RecordingSink, jump_s: float, seed: int
) -> tuple[Report, Window, list[int], float]:
    """Workload over 20 s; the jump at +5 s, kept to the end; more schedules created
    during the jump. Returns the report, the window, the lags of the firings due
    after the jump (ms) and the skew the worker measured after the jump (s)."""
    t0 = now_ms()
    end = t0 + 22_000
    workload = Workload(seed=seed, target=sink.url, prefix=f"jump{seed}")
    async with cluster.client() as client:
        await workload.create(client, workload.generate(160, t0 + 2_000, end))
        await asyncio.sleep(max(0, t0 + 5_000 - now_ms()) / 1000)
        jumped_ms = now_ms()
        clock.set(jump_s)
        skew_s = await clock.wait_for_skew(jump_s)
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
    return report, window, lags, skew_s


def test_the_faked_process_sleeps_and_reads_the_stepped_clock(tmp_path: Path) -> None:
    """The harness itself: under libfaketime (with the site fix) time.sleep sleeps
    for real and the wall clock reads the offset; the monotonic clock stays real."""
    clock = FakeClock(tmp_path / "faketime.rc")
    clock.set(-8)
    probe = (
        "import time\n"
        "wall, mono = time.time(), time.monotonic()\n"
        "time.sleep(0.2)\n"
        "print(round(time.monotonic() - mono, 2), round(wall - ref, 1))\n"
    )
    ref = f"ref = {time.time()}\n"
    result = subprocess.run(
        [sys.executable, "-c", ref + probe],
        env={**os.environ, **clock.env(libfaketime())},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    slept_s, offset_s = map(float, result.stdout.split())
    assert 0.2 <= slept_s < 1.0, slept_s
    assert -9.0 < offset_s < -7.0, offset_s


BUSY_THREADS_PROBE = """
import threading, time
counts = [0, 0]
stop = False
def busy(i):
    n = 0
    while not stop:
        n += 1
    counts[i] = n
threads = [threading.Thread(target=busy, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
time.sleep(0.5)
stop = True
for t in threads:
    t.join()
print(sum(counts))
"""


def test_the_faked_process_runs_threads_at_full_speed(tmp_path: Path) -> None:
    """The harness itself: two busy threads of a faked process get as much done as
    those of a plain one. With libfaketime's monotonic fix on, every timed wait for
    CPython's GIL returned at once and they ran 13x slower: the faked worker then lost
    its lease several times a run, and each takeover delivered firings twice."""
    clock = FakeClock(tmp_path / "faketime.rc")

    def work(env: dict[str, str]) -> int:
        result = subprocess.run(
            [sys.executable, "-c", BUSY_THREADS_PROBE],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return int(result.stdout)

    faked_env = clock.env(libfaketime())
    plain = max(work({}) for _ in range(2))
    faked = max(work(faked_env) for _ in range(2))
    # A wide margin: the defect costs a factor of 13, the noise of a shared machine 2.
    assert faked >= plain * 0.3, f"faked {faked} against plain {plain}"


@pytest.mark.parametrize("jump_s", [8.0, -8.0])
async def test_a_step_of_a_workers_wall_clock_changes_nothing(
    cluster: tuple[Cluster, FakeClock], sink: RecordingSink, jump_s: float
) -> None:
    c, clock = cluster
    assert abs(await clock.skew_seen_by_worker_s()) < 0.5
    report, _, lags, skew_s = await run_jump(c, clock, sink, jump_s, seed=51 if jump_s > 0 else 52)
    print(
        f"\nclock {jump_s:+.0f}s on one worker: the worker saw a skew of {skew_s:+.2f} s; "
        f"{len(lags)} firings due after the jump, lag min {min(lags)} ms, max {max(lags)} ms"
    )
    assert abs(skew_s - jump_s) < 1.5, f"the step did not reach the worker: skew {skew_s}"
    assert_report(f"clock {jump_s:+.0f}s on one worker", report, c, duplicates=False)
    # Not early (cluster time, not the worker's clock, says when a firing is due), and
    # not late by the step: a worker that went by its stepped clock would fire every
    # firing of its shards 8 s early (+8 s) or 8 s late (-8 s), about half of them.
    # The lag of a loaded machine is no such shift: on the three-node clusters here,
    # p50 5 ms and max 0.6-1.2 s with either step.
    lags.sort()
    assert lags[0] >= -50, lags[0]
    assert lags[len(lags) * 3 // 4] <= 2_000, lags[len(lags) * 3 // 4]
    assert lags[-1] < abs(jump_s) * 1000, lags[-1]
