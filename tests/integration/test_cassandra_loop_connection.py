"""The driver's connections served by the event loop (loop_connection.py), against a
real Cassandra: the single test node, and over TLS with a login on the three-node
cluster (scripts/test-replicated.sh runs this file there too)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cassandra import OperationTimedOut

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, connecting
from clockwork_svc.storage.cassandra.loop_connection import LoopConnection
from e2e.stores import CassandraAccess
from tests.conftest import require_server
from tests.integration.test_cassandra_schema import run_outside_loop

pytestmark = pytest.mark.cassandra

LOCAL = "SELECT key, cluster_name FROM system.local WHERE key = ?"


def _access() -> CassandraAccess:
    require_server("CLOCKWORK_CASSANDRA")
    return CassandraAccess.from_env("CLOCKWORK_CASSANDRA")


async def _connect(access: CassandraAccess) -> tuple[Any, Any]:
    return await connecting.connect(
        list(access.contact_points), timeout_s=60, **access.connect_kwargs()
    )


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    cluster, opened = await _connect(_access())
    yield opened
    await connecting.shutdown(cluster)


async def test_the_cluster_is_served_by_the_loop_that_connected_it(session: Any) -> None:
    connection_class = session.cluster.connection_class
    assert issubclass(connection_class, LoopConnection)
    assert connection_class.loop is asyncio.get_running_loop()
    assert connection_class.loop_thread == threading.get_ident()
    pools = list(session.get_pools())
    assert pools and all(isinstance(c, LoopConnection) for p in pools for c in p.get_connections())


async def test_concurrent_requests_each_get_their_own_answer(session: Any) -> None:
    """Many requests in flight on one connection, sent in shared writes and answered
    in shared reads: each caller gets the answer to its own request."""
    statement = await asyncio.to_thread(session.prepare, LOCAL)
    keys = ["local" if i % 3 == 0 else f"other-{i}" for i in range(3_000)]
    limit = asyncio.Semaphore(300)

    async def ask(key: str) -> list[dict[str, Any]]:
        async with limit:
            return (await bridge.execute(session, statement, (key,))).rows

    answers = await asyncio.gather(*(ask(k) for k in keys))
    for key, rows in zip(keys, answers, strict=True):
        assert [r["key"] for r in rows] == (["local"] if key == "local" else [])


async def test_a_request_from_a_driver_thread_is_served_while_the_loop_runs(
    session: Any,
) -> None:
    """A blocking call in a worker thread (as `prepare` and `connect` are made) is
    written and answered by the loop, which goes on serving its own requests."""
    statement = await asyncio.to_thread(session.prepare, LOCAL)
    on_loop = asyncio.gather(*(bridge.execute(session, statement, ("local",)) for _ in range(50)))
    from_thread = asyncio.to_thread(lambda: list(session.execute(statement, ("local",))))
    loop_pages, thread_rows = await asyncio.gather(on_loop, from_thread)
    assert [r["key"] for r in thread_rows] == ["local"]
    assert all([r["key"] for r in page.rows] == ["local"] for page in loop_pages)


async def test_large_requests_and_answers_cross_many_reads_and_writes(session: Any) -> None:
    """A request larger than the socket takes in one send (written as the socket drains)
    and answers larger than one read (reassembled from many)."""
    statement = await asyncio.to_thread(
        session.prepare,
        "SELECT key FROM system.local WHERE key = 'local' AND cluster_name = ? ALLOW FILTERING",
    )
    huge = "n" * (2 * 1024 * 1024)  # a request may be up to 2.5 MiB
    asked = asyncio.gather(*(bridge.execute(session, statement, (huge,)) for _ in range(12)))
    columns = bridge.fetch(session, "SELECT * FROM system_schema.columns", max_rows=100_000)
    pages, rows = await asyncio.gather(asked, columns)
    assert all(page.rows == [] for page in pages)
    assert len(rows) > 200
    assert {"keyspace_name", "table_name", "column_name"} <= set(rows[0])


async def test_a_request_that_outlasts_its_timeout_fails_and_the_connection_goes_on(
    session: Any,
) -> None:
    """The driver's request timer runs on the loop: the caller gets OperationTimedOut;
    the late answer is dropped and the connection serves the next request."""
    statement = await asyncio.to_thread(session.prepare, LOCAL)
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[BaseException] = loop.create_future()
    response = session.execute_async(statement, ("local",), timeout=0.000_001)
    response.add_callbacks(
        lambda _rows: loop.call_soon(failed.set_exception, AssertionError("answered")),
        lambda exc: loop.call_soon(failed.set_result, exc),
    )
    assert isinstance(await asyncio.wait_for(failed, 10), OperationTimedOut)
    page = await bridge.execute(session, statement, ("local",))
    assert [r["key"] for r in page.rows] == ["local"]


async def test_a_connection_the_network_drops_fails_its_requests_and_is_replaced(
    session: Any,
) -> None:
    """Every pooled socket cut at once (as a node restart does): requests in flight fail
    as StoreUnavailable, the driver opens new connections, and requests succeed again."""
    statement = await asyncio.to_thread(session.prepare, LOCAL)
    cut = [c for p in session.get_pools() for c in p.get_connections()]
    in_flight = [bridge.execute(session, statement, ("local",)) for _ in range(20)]
    for connection in cut:
        connection._socket.shutdown(socket.SHUT_RDWR)
    outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
    assert all(isinstance(o, bridge.Page | StoreUnavailable) for o in outcomes)
    assert all(c.is_closed for c in cut)
    for _ in range(200):
        try:
            page = await bridge.execute(session, statement, ("local",))
        except StoreUnavailable:
            await asyncio.sleep(0.1)
            continue
        assert [r["key"] for r in page.rows] == ["local"]
        break
    else:
        pytest.fail("no request succeeded within 20 s of the connections being cut")
    fresh = [c for p in session.get_pools() for c in p.get_connections()]
    assert fresh and not set(map(id, fresh)) & set(map(id, cut))


def test_a_cluster_whose_loop_has_ended_shuts_down_cleanly() -> None:
    """A cluster left open when its loop ended (a process exiting): its shutdown, from
    another thread, closes the sockets without the loop and does not hang."""
    access = _access()

    async def connect_and_leave() -> Any:
        cluster, opened = await _connect(access)
        page = await bridge.execute(opened, LOCAL.replace("?", "'local'"))
        assert [r["key"] for r in page.rows] == ["local"]
        return cluster

    cluster = run_outside_loop(connect_and_leave())
    sockets = [
        c._socket for s in cluster.sessions for p in s.get_pools() for c in p.get_connections()
    ]
    assert sockets
    shutting = threading.Thread(target=cluster.shutdown, daemon=True)
    shutting.start()
    shutting.join(30)
    assert not shutting.is_alive(), "Cluster.shutdown hung once its loop had ended"
    assert all(s.fileno() == -1 for s in sockets)
