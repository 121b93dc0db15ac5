"""The raw HTTP limit: the sink driven by a plain aiohttp load generator, with the
payloads and headers a worker sends and no scheduler in between."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import aiohttp


async def blast(url: str, payload: bytes, ids: Sequence[str], concurrency: int) -> float:
    """POST one request per id, `concurrency` in flight; returns requests/s."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    todo = iter(ids)
    timestamp = str(int(time.time()))

    async with aiohttp.ClientSession(connector=connector) as session:

        async def sender() -> None:
            for delivery_id in todo:
                headers = {
                    "Content-Type": "application/json",
                    "webhook-id": delivery_id,
                    "webhook-timestamp": timestamp,
                }
                async with session.post(url, data=payload, headers=headers) as response:
                    await response.read()
                    response.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        return len(ids) / (time.perf_counter() - started)
