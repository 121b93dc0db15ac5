"""CPU seconds and peak RSS of benchmark processes over a phase (psutil)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
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
    port = int(address.rsplit(":", 1)[1])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return int(conn.pid) if conn.pid is not None else None
    return None


def listening(addresses: dict[str, str | None]) -> dict[str, int]:
    """Name -> pid of the local process listening on each address given ("host:port",
    or a comma-separated list whose first entry is used); names whose address is None
    or served from elsewhere are left out."""
    found: dict[str, int] = {}
    for name, address in addresses.items():
        pid = None if not address else listener_pid(address.split(",")[0])
        if pid is not None:
            found[name] = pid
    return found


class ResourceMonitor:
    """Samples the RSS of some processes every `interval_s`; CPU from their counters."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.25) -> None:
        self._procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._interval_s = interval_s
        self._cpu0 = {name: self._cpu(p) for name, p in self._procs.items()}
        self._peak = {name: 0 for name in self._procs}
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return float(times.user + times.system)

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
                cpu = self._cpu(proc) - self._cpu0[name]
            except psutil.NoSuchProcess:
                cpu = float("nan")
            usage[name] = Usage(round(cpu, 2), round(self._peak[name] / 2**20, 1))
        return usage
