"""The raw HTTP limit: the sink driven by a plain aiohttp load generator, with the
payloads and headers a worker sends and no scheduler in between."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import aiohttp

Session = aiohttp.ClientSession


def session(concurrency: int) -> Session:
    """A client session keeping up to `concurrency` connections alive to any host."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    )


async def post(http: Session, url: str, payload: bytes, delivery_id: str, timestamp_s: int) -> None:
    """POST one delivery with a worker's headers; raises unless it is answered 2xx."""
    headers = {
        "Content-Type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp_s),
    }
    async with http.post(url, data=payload, headers=headers) as response:
        await response.read()
        response.raise_for_status()


async def blast(url: str, payload: bytes, ids: Sequence[str], concurrency: int) -> float:
    """POST one request per id, `concurrency` in flight; returns requests/s."""
    todo = iter(ids)
    timestamp_s = int(time.time())

    async with session(concurrency) as http:

        async def sender() -> None:
            for delivery_id in todo:
                await post(http, url, payload, delivery_id, timestamp_s)

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        return len(ids) / (time.perf_counter() - started)
