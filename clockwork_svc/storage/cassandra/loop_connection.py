"""The driver's connections, served by the event loop that opened the cluster.

The driver's default reactor (libev) reads and writes every socket on a thread of its
own. A request made on the event loop wakes that thread to send it; the answer wakes
it again to read and decode, and it hands the result back to the loop
(`call_soon_threadsafe`), which wakes the loop's thread. Each of those hand-overs is
a context switch and a handover of the GIL, and at a light load, where nothing
amortises them, they are most of a request's cost.

Here the loop itself owns the sockets. A request made on the loop is written at the
end of the loop's current iteration (the requests made in one iteration go out in
one `send`), and its answer is read and decoded in the loop's read callback, which
settles the caller's future in place. No thread is woken.

Driver threads still use the connections: the ones it opens for pools and the
control connection, its heartbeats, a `prepare` run in a worker thread. What they
send is queued and handed to the loop; timers they start are started on the loop.

What follows from it: a blocking driver call (`Cluster.connect`, `Session.prepare`,
`Cluster.shutdown`, anything that waits for an answer) must never run on the loop's
thread, since the loop it waits for would be the one it blocks. They run in worker
threads (`connecting`, `store.prepare`), and the loop must keep running meanwhile.
A cluster is bound to the loop that connected it (`bound_to`) and is used from that
loop only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from cassandra.connection import Connection, ConnectionShutdown

log = logging.getLogger(__name__)

# Socket errors that mean "not now": wait for the socket to be ready again.
_NOT_READY = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
# At most this much of the queue goes to the socket in one `send`.
_MAX_SEND_BYTES = 256 * 1024


class LoopTimer:
    """A driver timer (a request's timeout, a speculative retry) run by the loop.

    `cancel` may come from any thread: a timer cancelled before it fires never calls
    its callback, even if the loop had already scheduled it."""

    __slots__ = ("_callback", "_cancelled", "_handle", "_owner")

    def __init__(self, owner: type[LoopConnection], timeout: float, callback: Callable[[], Any]):
        self._owner = owner
        self._callback = callback
        self._cancelled = False
        self._handle: asyncio.TimerHandle | None = None
        if owner.on_loop():
            self._start(timeout)
        else:
            # A loop that is gone runs nothing, so there is nothing left to time out.
            with contextlib.suppress(RuntimeError):
                owner.loop.call_soon_threadsafe(self._start, timeout)

    def _start(self, timeout: float) -> None:
        if not self._cancelled:
            self._handle = self._owner.loop.call_later(timeout, self._fire)

    def _fire(self) -> None:
        if not self._cancelled:
            self._callback()

    def cancel(self) -> None:
        self._cancelled = True
        handle = self._handle
        if handle is None:
            return
        if self._owner.on_loop():
            handle.cancel()
        else:
            with contextlib.suppress(RuntimeError):
                self._owner.loop.call_soon_threadsafe(handle.cancel)


class LoopConnection(Connection):  # type: ignore[misc]
    """One connection to one node, read and written by `loop` (see the module)."""

    loop: ClassVar[asyncio.AbstractEventLoop]
    loop_thread: ClassVar[int]
    is_closed: bool  # the driver's
    is_defunct: bool
    # Reads take what the socket holds up to this much at a time (a page of rows is
    # often larger than the driver's 4 KiB default).
    in_buffer_size = 64 * 1024

    @classmethod
    def on_loop(cls) -> bool:
        """Called on the loop's thread while the loop is open: the loop may be used
        directly (elsewhere, only through `call_soon_threadsafe`)."""
        return threading.get_ident() == cls.loop_thread and not cls.loop.is_closed()

    @classmethod
    def initialize_reactor(cls) -> None:
        """The loop is the reactor: nothing to start."""

    @classmethod
    def handle_fork(cls) -> None:
        """Nothing is shared across processes."""

    @classmethod
    def create_timer(cls, timeout: float, callback: Callable[[], Any]) -> LoopTimer:
        return LoopTimer(cls, timeout, callback)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Connection.__init__(self, *args, **kwargs)
        self._outbox: collections.deque[bytes] = collections.deque()
        self._outbox_lock = threading.Lock()
        self._attached = False  # the loop watches the socket (loop thread only)
        self._writer = False  # the loop waits for the socket to take more
        self._flush_due = False  # a flush is scheduled for this iteration
        # Blocking: the TCP connection and the TLS handshake. The driver opens
        # connections in its own threads (see the module), never on the loop.
        self._connect_socket()
        self._socket.setblocking(False)
        self._fd = self._socket.fileno()
        self._hand_to_loop(self._attach)
        self._send_options_message()

    def _hand_to_loop(self, call: Callable[[], None]) -> None:
        try:
            self.loop.call_soon_threadsafe(call)
        except RuntimeError as exc:  # the loop is closed: this connection is of no use
            closed = f"the event loop serving {self.endpoint} is closed: {exc}"
            self.defunct(ConnectionShutdown(closed))

    def _attach(self) -> None:
        if self.is_closed:
            return
        self.loop.add_reader(self._fd, self._readable)
        self._attached = True
        self._flush()

    def push(self, data: bytes) -> None:
        with self._outbox_lock:
            self._outbox.append(data)
        if not self.on_loop():
            self._hand_to_loop(self._flush)
        elif not self._flush_due and not self._writer:
            # The other requests made in this iteration of the loop go in the same send.
            self._flush_due = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send what is queued until the socket takes no more (loop thread only)."""
        self._flush_due = False
        if self.is_closed or not self._attached:
            return
        while True:
            with self._outbox_lock:
                if not self._outbox:
                    break
                if len(self._outbox) > 1 and len(self._outbox[0]) < _MAX_SEND_BYTES:
                    chunk = [self._outbox.popleft()]
                    size = len(chunk[0])
                    while self._outbox and size + len(self._outbox[0]) <= _MAX_SEND_BYTES:
                        size += len(self._outbox[0])
                        chunk.append(self._outbox.popleft())
                    self._outbox.appendleft(b"".join(chunk))
                data = self._outbox[0]
            try:
                sent = self._socket.send(data)
            except _NOT_READY:
                # TLS wants the same bytes again once the socket is ready.
                self._wait_writable()
                return
            except OSError as exc:
                self.defunct(exc)
                return
            with self._outbox_lock:
                if sent < len(data):
                    self._outbox[0] = data[sent:]
                else:
                    self._outbox.popleft()
            if sent < len(data):
                self._wait_writable()
                return
        if self._writer:
            self.loop.remove_writer(self._fd)
            self._writer = False

    def _wait_writable(self) -> None:
        if not self._writer:
            self.loop.add_writer(self._fd, self._flush)
            self._writer = True

    def _readable(self) -> None:
        """Read what the socket holds and process every whole frame (loop thread)."""
        ended = False
        try:
            while True:
                received = self._socket.recv(self.in_buffer_size)
                if not received:
                    ended = True
                    break
                self._iobuf.write(received)
                # A TLS socket may hold decrypted bytes the file descriptor no longer
                # signals.
                pending = isinstance(self._socket, ssl.SSLSocket) and self._socket.pending()
                if len(received) < self.in_buffer_size and not pending:
                    break
        except _NOT_READY:
            pass
        except OSError as exc:
            self.defunct(exc)
            return
        if self._iobuf.tell():
            self.process_io_buffer()
        if ended:
            log.debug("connection %s closed by the server", self.endpoint)
            self.close()
        elif self._outbox and not self._writer and not self._flush_due:
            self._flush()  # TLS may have wanted this read before it could send

    def close(self) -> None:
        with self.lock:
            if self.is_closed:
                return
            self.is_closed = True
        if self.on_loop():
            self._detach()
        else:
            try:
                self.loop.call_soon_threadsafe(self._detach)
            except RuntimeError:  # the loop is closed: nothing watches the socket
                self._socket.close()
        if not self.is_defunct:
            self.error_all_requests(ConnectionShutdown(f"Connection to {self.endpoint} was closed"))

    def _detach(self) -> None:
        if self._attached:
            self.loop.remove_reader(self._fd)
            if self._writer:
                self.loop.remove_writer(self._fd)
            self._attached = self._writer = False
        with contextlib.suppress(OSError):
            self._socket.close()


def bound_to(loop: asyncio.AbstractEventLoop) -> type[LoopConnection]:
    """A connection class for one cluster, served by `loop`; call it on that loop."""
    return type(
        "LoopConnection",
        (LoopConnection,),
        {"loop": loop, "loop_thread": threading.get_ident()},
    )
