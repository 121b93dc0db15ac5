"""Helpers shared by the Kubernetes end-to-end tests (kwok node and real node)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.5
) -> float:
    """Poll ``check`` until true; the seconds it took, or AssertionError naming ``what``."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s}s")
        await asyncio.sleep(interval_s)
    return time.monotonic() - started


def manifest(name: str, namespace: str, spec: dict[str, Any]) -> str:
    """A ClockworkSchedule as JSON, for `kubectl apply -f -`."""
    return json.dumps(
        {
            "apiVersion": "clockwork.io/v1alpha1",
            "kind": "ClockworkSchedule",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )
