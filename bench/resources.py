"""CPU seconds and peak RSS of benchmark processes over a phase (psutil)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_s: float
    peak_rss_mb: float


def cpu_per_100k(usage: Mapping[str, Usage], firings: int) -> dict[str, float]:
    """`<name>_cpu_s_per_100k` for each process: its CPU seconds over a phase scaled
    to 100k firings."""
    per_100k = 100_000 / max(1, firings)
    return {f"{name}_cpu_s_per_100k": round(u.cpu_s * per_100k, 1) for name, u in usage.items()}


def listener_pid(address: str) -> int | None:
    """The pid of the local process listening on `address` ("host:port"), if any: the
    harness's Cassandra, say, whose CPU belongs in a benchmark's cost figures."""
    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    for conn in psutil.net_connections(kind="tcp"):
        if (
            conn.status == psutil.CONN_LISTEN
            and conn.laddr
            and conn.laddr.port == port
            # Several nodes of a cluster may share a port, each on its own address.
            and conn.laddr.ip in (host, "0.0.0.0", "::")
        ):
            return int(conn.pid) if conn.pid is not None else None
    return None


GROUP_MARK = "#"
"""`cassandra#2`: the second process of the group `cassandra` (a cluster's nodes)."""


def listening(addresses: dict[str, str | None]) -> dict[str, int]:
    """Name -> pid of the local process listening on each address given ("host:port");
    a comma-separated list names a group (`name`, `name#2`, ...: ResourceMonitor adds
    their CPU up). Names whose address is None or served from elsewhere are left out."""
    found: dict[str, int] = {}
    for name, address in addresses.items():
        for index, entry in enumerate((address or "").split(",")):
            pid = listener_pid(entry) if entry else None
            if pid is not None:
                found[name if index == 0 else f"{name}{GROUP_MARK}{index + 1}"] = pid
    return found


def cpu_s(proc: psutil.Process) -> float:
    """The CPU seconds (user + system) a process has used so far."""
    times = proc.cpu_times()
    return float(times.user + times.system)


class ResourceMonitor:
    """Samples the RSS of some processes every `interval_s`; CPU from their counters."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.25) -> None:
        self._procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._interval_s = interval_s
        self._cpu0 = {name: cpu_s(p) for name, p in self._procs.items()}
        self._peak = {name: 0 for name in self._procs}
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        for name, proc in self._procs.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                self._peak[name] = max(self._peak[name], proc.memory_info().rss)

    async def _run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self._interval_s)

    def start(self) -> ResourceMonitor:
        self._task = asyncio.create_task(self._run(), name="bench-resource-monitor")
        return self

    async def stop(self) -> dict[str, Usage]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._sample()
        usage: dict[str, Usage] = {}
        for name, proc in self._procs.items():
            try:
                cpu = cpu_s(proc) - self._cpu0[name]
            except psutil.NoSuchProcess:
                cpu = float("nan")
            usage[name] = Usage(round(cpu, 2), round(self._peak[name] / 2**20, 1))
        return fold_groups(usage)


def fold_groups(usage: Mapping[str, Usage]) -> dict[str, Usage]:
    """One entry per group (`listening`): the CPU of its processes added up, and the
    largest peak RSS among them (each node's own)."""
    folded: dict[str, Usage] = {}
    for name, u in usage.items():
        group = name.split(GROUP_MARK, 1)[0]
        if group in folded:
            before = folded[group]
            folded[group] = Usage(
                round(before.cpu_s + u.cpu_s, 2), max(before.peak_rss_mb, u.peak_rss_mb)
            )
        else:
            folded[group] = u
    return folded


class RssTimeline:
    """RSS over a long run: every `interval_s`, the RSS of each process `pids()` names
    at that moment (a name may move to a new pid, e.g. a restarted server)."""

    def __init__(self, pids: Callable[[], Mapping[str, int]], interval_s: float = 5.0) -> None:
        self._pids = pids
        self._interval_s = interval_s
        self._procs: dict[int, psutil.Process] = {}
        self._t0 = time.monotonic()
        self.series: dict[str, list[tuple[float, float]]] = {}
        """Name -> [(seconds since start, RSS MiB), ...]."""
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        t = round(time.monotonic() - self._t0, 1)
        for name, pid in self._pids().items():
            try:
                proc = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
                rss = proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            self.series.setdefault(name, []).append((t, round(rss / 2**20, 1)))

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self._interval_s)

    def start(self) -> RssTimeline:
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="rss-timeline")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()

    def summary(self) -> dict[str, dict[str, float]]:
        """Per name: RSS (MiB) at the first sample past a tenth of the process's own
        samples (after warm-up), the peak, and the last sample."""
        out: dict[str, dict[str, float]] = {}
        for name, points in self.series.items():
            values = [mb for _, mb in points]
            out[name] = {
                "warm_mb": values[len(values) // 10],
                "peak_mb": max(values),
                "last_mb": values[-1],
                "samples": len(values),
            }
        return out
