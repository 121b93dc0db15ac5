"""The worker's group commit (storage/cassandra/write_batcher.py) on real Cassandra:
writes issued together go as one batch and are all applied; one refused write fails
alone; a size cap splits batches; an unreachable cluster fails every write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, connecting
from clockwork_svc.storage.cassandra.write_batcher import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_STATEMENTS,
    WriteBatcher,
    counted_size,
)
from tests.conftest import require_server
from tests.support.cassandra_table import scratch_table

pytestmark = pytest.mark.cassandra


@pytest.fixture
async def table() -> AsyncIterator[tuple[Any, Any, str]]:
    """(session, prepared upsert, table): `t(k text, c int, v text, primary key (k, c))`."""
    async with scratch_table("batcher_") as (session, name):
        upsert = await asyncio.to_thread(
            session.prepare, f"INSERT INTO {name} (k, c, v) VALUES (?, ?, ?)"
        )
        yield session, upsert, name


async def rows(session: Any, name: str, key: str) -> dict[int, str]:
    got = await bridge.fetch(
        session, f"SELECT c, v FROM {name} WHERE k = %s", (key,), max_rows=10_000
    )
    return {r["c"]: r["v"] for r in got}


async def test_writes_issued_together_go_as_few_batches_and_all_land(
    table: tuple[Any, Any, str],
) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=32)
    keys = [f"k{uuid.uuid4().hex[:6]}-{i % 40}" for i in range(200)]  # ~40 partitions
    await asyncio.gather(*(batcher.write(upsert, (k, i, f"v{i}")) for i, k in enumerate(keys)))
    assert batcher.statements_sent == 200
    assert batcher.batches_sent <= 200 // 32 + 1
    for i, k in enumerate(keys):
        assert (await rows(session, name, k))[i] == f"v{i}"


async def test_one_refused_write_fails_alone(table: tuple[Any, Any, str]) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session)
    key = uuid.uuid4().hex
    good = [batcher.write(upsert, (key, i, "ok")) for i in range(5)]
    bad = batcher.write(upsert, (key, "not an int", "x"))
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    assert results[:5] == [None] * 5
    assert isinstance(results[5], Exception) and not isinstance(results[5], StoreUnavailable)
    assert await rows(session, name, key) == dict.fromkeys(range(5), "ok")


async def test_a_group_of_writes_lands_in_one_batch_and_fails_together(
    table: tuple[Any, Any, str],
) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=4)
    key = uuid.uuid4().hex
    # Each group of three is never split across batches (4 statements at most).
    groups = [[(upsert, (key, g * 10 + i, "ok")) for i in range(3)] for g in range(4)]
    await asyncio.gather(*(batcher.write_all(group) for group in groups))
    assert (batcher.batches_sent, batcher.statements_sent) == (4, 12)
    assert await rows(session, name, key) == {g * 10 + i: "ok" for g in range(4) for i in range(3)}

    other = uuid.uuid4().hex
    good = batcher.write_all([(upsert, (other, 1, "ok")), (upsert, (other, 2, "ok"))])
    bad = batcher.write_all([(upsert, (other, 3, "ok")), (upsert, (other, "not an int", "x"))])
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], Exception) and not isinstance(results[1], StoreUnavailable)
    assert await rows(session, name, other) == {1: "ok", 2: "ok"}


async def test_a_size_cap_splits_batches(table: tuple[Any, Any, str]) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=100, max_bytes=4_096)
    key = uuid.uuid4().hex
    big = "x" * 1_000
    await asyncio.gather(*(batcher.write(upsert, (key, i, big)) for i in range(20)))
    assert batcher.batches_sent >= 5  # ~1 KiB each, 4 KiB per batch
    assert len(await rows(session, name, key)) == 20


@pytest.mark.parametrize(("value_len", "partitions"), [(0, 256), (40, 256), (200, 64), (3_000, 8)])
async def test_the_default_size_cap_stays_below_cassandras_fail_threshold(
    table: tuple[Any, Any, str], value_len: int, partitions: int
) -> None:
    """At the most statements a worker may batch (256, the flag's maximum) and the
    default byte cap, no batch is refused "Batch too large" (batch_size_fail_threshold,
    50 KiB as Cassandra counts it): a refused batch would be re-sent one statement per
    request, which `batches_sent` would show."""
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=256)
    prefix = uuid.uuid4().hex
    writes = [(f"{prefix}-{i % partitions}", i, "v" * value_len) for i in range(256)]
    await asyncio.gather(*(batcher.write(upsert, w) for w in writes))
    assert batcher.statements_sent == 256
    assert batcher.batches_sent < 256 * (value_len + 60) // 20_000 + 3
    for key in {w[0] for w in writes[:3]}:
        assert len(await rows(session, name, key)) == 256 // partitions


def _batch_warnings(session: Any, statements: list[str]) -> list[str]:
    """Send one UNLOGGED batch of CQL `statements`; Cassandra's warnings about it."""
    text = "BEGIN UNLOGGED BATCH\n" + ";\n".join(statements) + ";\nAPPLY BATCH"
    return list(session.execute(text).response_future.warnings or [])


async def test_the_harness_cassandra_does_not_warn_about_a_full_worker_batch(
    table: tuple[Any, Any, str],
) -> None:
    """The harness's Cassandra raises the batch warning thresholds
    (e2e/infra/cassandra.py; docs/operations.md, "Cassandra settings"). A batch at the
    worker's default caps (128 statements over 64 partitions, ~24 KiB of values as the
    batcher counts them) draws no warning; at Cassandra's defaults (5 KiB, 10
    partitions) it drew both. A batch over the raised size threshold still warns, so
    the check can see a warning."""
    session, _, name = table
    prefix = uuid.uuid4().hex[:8]
    per_statement = DEFAULT_MAX_BYTES // DEFAULT_MAX_STATEMENTS
    value = "v" * (per_statement - counted_size((f"{prefix}-00", 0, "")))
    full = [
        f"INSERT INTO {name} (k, c, v) VALUES ('{prefix}-{i % 64:02d}', {i}, '{value}')"
        for i in range(DEFAULT_MAX_STATEMENTS)
    ]
    assert await asyncio.to_thread(_batch_warnings, session, full) == []
    # ~44 KiB over two partitions (a one-partition batch is never checked): over the
    # raised warning threshold (40 KiB), under the fail threshold (50 KiB).
    big = [
        f"INSERT INTO {name} (k, c, v) VALUES ('{prefix}-{i % 2}', {i}, '{'v' * 5_000}')"
        for i in range(9)
    ]
    warned = await asyncio.to_thread(_batch_warnings, session, big)
    assert any("exceeding specified threshold of 40" in w for w in warned), warned


async def test_one_at_a_time_when_the_limit_is_one(table: tuple[Any, Any, str]) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=1)
    key = uuid.uuid4().hex
    await asyncio.gather(*(batcher.write(upsert, (key, i, "v")) for i in range(10)))
    assert batcher.batches_sent == batcher.statements_sent == 10
    assert len(await rows(session, name, key)) == 10


async def test_an_unreachable_cluster_fails_every_write(table: tuple[Any, Any, str]) -> None:
    _, upsert, _ = table
    address = require_server("CLOCKWORK_CASSANDRA")
    cluster, session = await connecting.connect([address], timeout_s=60)
    prepared = await asyncio.to_thread(session.prepare, upsert.query_string)
    await connecting.shutdown(cluster)  # the session's connections are gone
    batcher = WriteBatcher(session)
    results = await asyncio.gather(
        *(batcher.write(prepared, ("k", i, "v")) for i in range(4)), return_exceptions=True
    )
    assert all(isinstance(r, StoreUnavailable) for r in results), results


async def test_a_linger_gathers_writes_of_later_turns(table: tuple[Any, Any, str]) -> None:
    """Writes issued one per event-loop turn: with a linger they share one batch, and
    each caller still returns only once its write is applied; with none, one each."""
    session, upsert, name = table
    for linger_s, batches in ((0.0, 6), (0.5, 1)):
        batcher = WriteBatcher(session, linger_s=linger_s)
        key = uuid.uuid4().hex
        pending = []
        for i in range(6):
            pending.append(asyncio.ensure_future(batcher.write(upsert, (key, i, "v"))))
            await asyncio.sleep(0)
        await asyncio.gather(*pending)
        assert (batcher.batches_sent, batcher.statements_sent) == (batches, 6), linger_s
        assert len(await rows(session, name, key)) == 6


async def test_a_full_batch_does_not_wait_for_the_linger(table: tuple[Any, Any, str]) -> None:
    session, upsert, name = table
    batcher = WriteBatcher(session, max_statements=4, linger_s=30.0)
    key = uuid.uuid4().hex
    await asyncio.wait_for(
        asyncio.gather(*(batcher.write(upsert, (key, i, "v")) for i in range(8))), timeout=10
    )
    assert batcher.batches_sent == 2
    assert len(await rows(session, name, key)) == 8
