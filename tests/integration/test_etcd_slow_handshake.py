"""A slow etcd handshake (a loaded machine, a congested link) must not make etcd
unreachable.

gRPC core uses `grpc.min_reconnect_backoff_ms` as the *connect timeout* of every
connection attempt, not only as a backoff. With it at 100 ms, any connection whose
HTTP/2 SETTINGS frame took longer than the backoff failed with "connection attempt
timed out before receiving SETTINGS frame", for as long as the handshake stayed slow
(CI saw it once, on a loaded machine). Here a TCP proxy in front of the real etcd holds
etcd's first bytes for 1.5 s on every connection.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from clockwork_svc.coordination.etcd import cluster_status, connect
from tests.conftest import require_server

HOLD_S = 1.5


class SlowHandshakeProxy:
    """Forwards TCP to etcd, holding the server's first bytes of each connection."""

    def __init__(self, upstream: str, hold_s: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._host, self._port = host or "127.0.0.1", int(port)
        self._hold_s = hold_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        me = asyncio.current_task()
        assert me is not None
        self._tasks.add(me)
        writers = [writer]
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
            writers.append(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer, 0.0), self._pump(up_reader, writer, self._hold_s)
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in writers:
                w.close()
            self._tasks.discard(me)

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, hold_s: float) -> None:
        first = True
        while data := await src.read(65536):
            if first and hold_s:
                await asyncio.sleep(hold_s)
            first = False
            dst.write(data)
            await dst.drain()
        dst.close()  # one side ended: end the other, so the whole connection closes

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


@pytest.fixture
async def slow_etcd() -> AsyncIterator[tuple[str, SlowHandshakeProxy]]:
    proxy = SlowHandshakeProxy(require_server("CLOCKWORK_ETCD"), HOLD_S)
    address = await proxy.start()
    try:
        yield address, proxy
    finally:
        await proxy.stop()


async def test_slow_handshake_connects(slow_etcd: tuple[str, SlowHandshakeProxy]) -> None:
    address, proxy = slow_etcd
    started = time.monotonic()
    client = await connect(address)
    try:
        key = f"/clockwork-test/{uuid.uuid4().hex}".encode()
        await client.put(key, b"v")
        value = await client.get(key)
        assert value is not None and value.value == b"v"
        await client.delete(key)
    finally:
        await client.close()
    took = time.monotonic() - started
    print(f"slow handshake: first call after {took:.2f}s over {proxy.connections} connection(s)")
    assert took >= HOLD_S  # the proxy really held the handshake
    assert proxy.connections >= 1


async def test_cluster_status_over_a_slow_handshake(
    slow_etcd: tuple[str, SlowHandshakeProxy],
) -> None:
    address, _ = slow_etcd
    view = await cluster_status(address, "c" + uuid.uuid4().hex[:8])
    assert view.workers == {} and view.owners == {}
