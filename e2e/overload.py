"""Overload nemeses: a burst of creates far past the api's in-flight limit, and a
store that runs at a fraction of its speed.

``create_burst`` sends every create at once on raw gRPC channels with gRPC's retries
off (what a client without the documented retry policy sees) and sorts the answers:
created, refused with a retry hint (nothing done: the caller checks that), or anything
else (``unclean``: CANCELLED, UNKNOWN, INTERNAL, an UNAVAILABLE without a hint, a
deadline; whether those did anything is for the caller to find out).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.client import refusal_hint_ms
from clockwork_svc.domain.spec import ScheduleSpec
from clockwork_svc.server.auth import TENANT_METADATA


async def throttle(pid: int, seconds: float, run_s: float = 0.02, stop_s: float = 0.18) -> None:
    """Let `pid` run `run_s` of every `run_s + stop_s` for `seconds` (SIGSTOP/SIGCONT,
    as a CPU-throttled node); it runs at full speed again when this returns."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(run_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@dataclass
class BurstOutcome:
    created: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Key -> (schedule id, when its OK arrived in ms since the epoch)."""
    refused: list[str] = field(default_factory=list)
    """Keys answered UNAVAILABLE with a retry hint."""
    hints_ms: list[int] = field(default_factory=list)
    unclean: dict[str, str] = field(default_factory=dict)
    """Key -> the status of any other answer."""
    seconds: float = 0.0

    def figures(self) -> dict[str, object]:
        hints = sorted(self.hints_ms)
        return {
            "calls": len(self.created) + len(self.refused) + len(self.unclean),
            "ok": len(self.created),
            "refused": len(self.refused),
            "unclean": len(self.unclean),
            "unclean_codes": sorted(set(self.unclean.values())),
            "hint_p50_ms": hints[len(hints) // 2] if hints else None,
            "hint_max_ms": hints[-1] if hints else None,
            "seconds": round(self.seconds, 2),
        }


async def create_burst(
    address: str,
    tenant: str,
    entries: Sequence[tuple[str, ScheduleSpec]],
    connections: int = 4,
    timeout_s: float = 60.0,
) -> BurstOutcome:
    """Send one unary CreateSchedule per entry, all at once, over `connections`
    connections of their own."""
    options = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, options) for _ in range(connections)]
    stubs = [pb_grpc.SchedulerServiceStub(c) for c in channels]
    metadata = ((TENANT_METADATA, tenant),)
    out = BurstOutcome()

    async def one(i: int, key: str, spec: pb.ScheduleSpec) -> None:
        request = pb.CreateScheduleRequest(key=key, spec=spec)
        try:
            reply = await stubs[i % connections].CreateSchedule(
                request, metadata=metadata, timeout=timeout_s
            )
            out.created[key] = (reply.schedule.id, time.time_ns() // 1_000_000)
        except grpc.aio.AioRpcError as exc:
            hint = refusal_hint_ms(exc)
            if hint is None:
                out.unclean[key] = exc.code().name
            else:
                out.refused.append(key)
                out.hints_ms.append(hint)

    requests = [(key, convert.spec_to_pb(spec)) for key, spec in entries]
    started = time.perf_counter()
    try:
        await asyncio.gather(*(one(i, key, spec) for i, (key, spec) in enumerate(requests)))
    finally:
        out.seconds = time.perf_counter() - started
        for channel in channels:
            await channel.close()
    return out
