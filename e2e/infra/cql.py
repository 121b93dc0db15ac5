"""A tiny CQL native-protocol (v4) client, just enough to prove a node is ready.

An open TCP port is not readiness: Cassandra binds the native port before it
can serve queries, and a half-started node answers STARTUP but fails reads of
``system.local``.  So readiness is a real handshake (STARTUP -> READY) followed
by ``SELECT release_version FROM system.local``.  Stdlib only, so the harness
works before the project's own dependencies are installed.

Protocol v4 is used on purpose: v5 switches to segment framing after the
handshake, and v4 is supported by every Cassandra from 2.2 to 5.x.

A secured node (``cassandra_secure.py``) is reached over TLS (``tls``) and logs in
with a role's password (``login``: SASL PLAIN, what PasswordAuthenticator takes).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass

VERSION_REQUEST = 0x04
VERSION_RESPONSE = 0x84
HEADER = struct.Struct(">BBhBi")  # version, flags, stream, opcode, body length

OP_ERROR = 0x00
OP_STARTUP = 0x01
OP_READY = 0x02
OP_AUTHENTICATE = 0x03
OP_OPTIONS = 0x05
OP_QUERY = 0x07
OP_RESULT = 0x08
OP_AUTH_RESPONSE = 0x0F
OP_AUTH_SUCCESS = 0x10

RESULT_ROWS = 0x0002
CONSISTENCY_ONE = 0x0001
MAX_BODY = 16 * 1024 * 1024

ROWS_GLOBAL_TABLES_SPEC = 0x0001
ROWS_HAS_MORE_PAGES = 0x0002
ROWS_NO_METADATA = 0x0004

# Type option ids that carry nested options.
TYPE_CUSTOM, TYPE_LIST, TYPE_MAP, TYPE_SET = 0x0000, 0x0020, 0x0021, 0x0022


class CqlError(Exception):
    """The server answered, but not with what a ready node answers."""


@dataclass(frozen=True)
class Login:
    """A role and its password, for a node with PasswordAuthenticator."""

    role: str
    password: str


class _Reader:
    """Sequential decoder for the protocol's [int], [short], [string], [bytes] notations."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CqlError("truncated response")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def read_int(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def read_short(self) -> int:
        value: int = struct.unpack(">H", self.take(2))[0]
        return value

    def read_string(self) -> str:
        return self.take(self.read_short()).decode("utf-8")

    def read_bytes(self) -> bytes | None:
        n = self.read_int()
        return None if n < 0 else self.take(n)

    def skip_type(self) -> None:
        kind = self.read_short()
        if kind == TYPE_CUSTOM:
            self.read_string()
        elif kind in (TYPE_LIST, TYPE_SET):
            self.skip_type()
        elif kind == TYPE_MAP:
            self.skip_type()
            self.skip_type()
        elif kind > TYPE_SET:  # UDT / tuple: never in the probe query
            raise CqlError(f"unsupported column type {kind:#x}")


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def _send(sock: socket.socket, opcode: int, body: bytes) -> None:
    sock.sendall(HEADER.pack(VERSION_REQUEST, 0, 0, opcode, len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by server")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> tuple[int, bytes]:
    """Read one frame; return (opcode, body), turning ERROR frames into CqlError."""
    version, _flags, _stream, opcode, length = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if version != VERSION_RESPONSE or not 0 <= length <= MAX_BODY:
        raise CqlError(f"not a CQL v4 response (version byte {version:#x}, length {length})")
    body = _recv_exact(sock, length)
    if opcode == OP_ERROR:
        reader = _Reader(body)
        code = reader.read_int()
        raise CqlError(f"server error {code:#06x}: {reader.read_string()}")
    return opcode, body


def _skip_strings(reader: _Reader, count: int) -> None:
    for _ in range(count):
        reader.read_string()


def _rows(body: bytes) -> list[list[bytes | None]]:
    """The cells of every row of a RESULT/Rows body (first page only)."""
    reader = _Reader(body)
    if reader.read_int() != RESULT_ROWS:
        raise CqlError("query did not return rows")
    flags, columns = reader.read_int(), reader.read_int()
    if flags & ROWS_HAS_MORE_PAGES:
        reader.read_bytes()
    if not flags & ROWS_NO_METADATA:
        global_spec = bool(flags & ROWS_GLOBAL_TABLES_SPEC)
        if global_spec:
            _skip_strings(reader, 2)
        for _ in range(columns):
            if not global_spec:
                _skip_strings(reader, 2)  # keyspace, table
            _skip_strings(reader, 1)  # column name
            reader.skip_type()
    count = reader.read_int()
    return [[reader.read_bytes() for _ in range(columns)] for _ in range(count)]


def _connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(timeout)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host if tls.check_hostname else None)
    except BaseException:
        sock.close()
        raise


def _handshake(sock: socket.socket, login: Login | None) -> None:
    """STARTUP, and the password login if the node asks for one, up to READY."""
    _send(sock, OP_STARTUP, struct.pack(">H", 1) + _string("CQL_VERSION") + _string("3.0.0"))
    opcode, _ = _recv(sock)
    if opcode == OP_AUTHENTICATE:
        if login is None:
            raise CqlError("node requires authentication")
        token = b"\0" + login.role.encode() + b"\0" + login.password.encode()
        _send(sock, OP_AUTH_RESPONSE, struct.pack(">i", len(token)) + token)
        opcode, _ = _recv(sock)
        if opcode != OP_AUTH_SUCCESS:
            raise CqlError(f"expected AUTH_SUCCESS, got opcode {opcode:#x}")
    elif opcode != OP_READY:
        raise CqlError(f"expected READY after STARTUP, got opcode {opcode:#x}")


def _request(
    host: str,
    port: int,
    query: str,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> bytes:
    """Handshake with the node at ``host:port``, run ``query`` at ONE, return the RESULT body.

    Raises OSError if nothing useful listens (``ssl.SSLError`` for a failed TLS
    handshake), CqlError if the node answers but is not ready or refuses the login.
    """
    return _requests(host, port, [query], timeout, tls, login)[0]


def _requests(
    host: str,
    port: int,
    queries: Sequence[str],
    timeout: float,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> list[bytes]:
    """``_request`` for several queries in order on one connection, behind one login."""
    bodies: list[bytes] = []
    with _connect(host, port, timeout, tls) as sock:
        _handshake(sock, login)
        for query in queries:
            text = query.encode()
            _send(
                sock,
                OP_QUERY,
                struct.pack(">i", len(text)) + text + struct.pack(">HB", CONSISTENCY_ONE, 0),
            )
            opcode, body = _recv(sock)
            if opcode != OP_RESULT:
                raise CqlError(f"expected RESULT, got opcode {opcode:#x}")
            bodies.append(body)
    return bodies


def _query(
    host: str,
    port: int,
    query: str,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> list[list[bytes | None]]:
    """The rows ``query`` returns (see ``_request``)."""
    return _rows(_request(host, port, query, timeout, tls, login))


def execute(
    host: str,
    port: int,
    statement: str,
    timeout: float = 10.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> None:
    """Run a statement whose result is not rows (DDL, CREATE ROLE, GRANT)."""
    _request(host, port, statement, timeout, tls, login)


def execute_all(
    host: str,
    port: int,
    statements: Sequence[str],
    timeout: float = 10.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> None:
    """``execute`` for several statements in order on one connection: one login, so a
    statement that changes what a login reads (the roles' replication) cannot refuse
    the next statement's login."""
    _requests(host, port, statements, timeout, tls, login)


def release_version(
    host: str,
    port: int,
    timeout: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> str:
    """The node's ``release_version``: proof that it serves reads (see ``_request``)."""
    found = _query(host, port, "SELECT release_version FROM system.local", timeout, tls, login)
    if not found or not found[0]:
        raise CqlError("query returned no rows")
    cell = found[0][0]
    return "" if cell is None else cell.decode("utf-8")


def peer_count(
    host: str,
    port: int,
    timeout: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> int:
    """How many other nodes this node knows through gossip (rows of ``system.peers_v2``)."""
    return len(_query(host, port, "SELECT peer FROM system.peers_v2", timeout, tls, login))


def hinted_nodes(
    host: str,
    port: int,
    timeout: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> int:
    """How many nodes this node holds hints for, not yet replayed to them."""
    query = "SELECT address FROM system_views.pending_hints"
    return len(_query(host, port, query, timeout, tls, login))


def schema_versions(
    host: str,
    port: int,
    timeout: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
    login: Login | None = None,
) -> set[bytes]:
    """The schema versions this node sees: its own and each peer's (one when they agree)."""
    own = _query(host, port, "SELECT schema_version FROM system.local", timeout, tls, login)
    peers = _query(host, port, "SELECT schema_version FROM system.peers_v2", timeout, tls, login)
    return {row[0] for row in own + peers if row[0] is not None}
