"""The asyncio bridge (storage/cassandra/bridge.py) on real Cassandra: an answered
request, with or without a speculative execution, is freed by reference counting,
not left in a reference cycle for the cyclic collector (which would otherwise walk
every recent request's rows at each young collection). A failed request is still
left to the collector: the driver keeps its error, whose traceback holds the
request; failures are rare on the hot path."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from cassandra.cluster import ResponseFuture

from clockwork_svc.storage.cassandra import bridge
from tests.support.cassandra_table import scratch_table

pytestmark = pytest.mark.cassandra


@pytest.fixture(params=[0.0, 0.2], ids=["timeout-timer", "speculative-timer"])
async def table(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any]]:
    """(session, an idempotent prepared read of 20 rows), on a session whose default
    profile does or does not execute such statements speculatively (a timer of each
    kind)."""
    async with scratch_table("bridge_", speculative_delay_s=request.param) as (session, name):
        for c in range(20):
            await bridge.execute(
                session, f"INSERT INTO {name} (k, c, v) VALUES ('a', %s, 'x')", (c,)
            )
        select = await asyncio.to_thread(session.prepare, f"SELECT c, v FROM {name} WHERE k = ?")
        select.is_idempotent = True  # the driver executes only these speculatively
        yield session, select


@pytest.fixture
def saved_garbage() -> Iterator[list[Any]]:
    """What the cyclic collector finds unreachable from here on (kept, not freed)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_answered_requests_leave_no_cycle(
    table: tuple[Any, Any], saved_garbage: list[Any]
) -> None:
    session, select = table
    pages = await asyncio.gather(*(bridge.execute(session, select, ("a",)) for _ in range(50)))
    assert all(len(p.rows) == 20 for p in pages)
    paged = await bridge.fetch(session, select, ("a",), max_rows=100, page_size=7)
    assert len(paged) == 20
    del pages, paged

    gc.collect()
    left = [o for o in saved_garbage if type(o) is ResponseFuture]  # not a weak proxy's
    assert left == [], f"{len(left)} finished requests were only freed by the cyclic collector"
