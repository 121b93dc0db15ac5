"""Hypothesis strategies that build serialized protobuf requests from message descriptors.

The encoder writes the wire format itself rather than filling generated classes, so a
string field can carry bytes that are not UTF-8 (which the Python protobuf runtime
refuses to set but a hostile client can send), an int32 can carry any varint, and a
field can repeat far more often than a well-behaved client would send it. Every field
of every message is reached by walking the descriptors, so a new RPC or field is
fuzzed without touching this file; known field names additionally draw from pools of
meaningful values (valid keys, cron expressions, time zones, URLs...) so requests get
past the first check and reach deeper validation.
"""

from __future__ import annotations

import base64
import functools
import struct
import time
from collections.abc import Mapping
from typing import TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

Bytes = st.SearchStrategy[bytes]
T = TypeVar("T")

MAX_DEPTH = 6
MAX_REPEATED_BYTES = 9 * 1024 * 1024
_NOW_S = int(time.time())

# Integer ranges of the protobuf scalar types.
_INT_RANGES: Mapping[int, tuple[int, int]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_ENUM: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_VARINT = 0
_FIXED64 = 1
_LENGTH = 2
_FIXED32 = 5

# Meaningful values for fields by name (strings) or full name (numbers).
STRING_POOLS: Mapping[str, list[str]] = {
    "key": ["job-1", "job-2", "a", "k" * 200, "k" * 201, "", "a b", "../x", "ключ", "x\x00y"],
    "ordering_key": ["", "orders", "k" * 201, "bad key"],
    "name": ["fuzzed", "fuzz", "missing", "", "t" * 64, "t" * 65, "bad name", "é"],
    "url": [
        "http://127.0.0.1:9/hook",
        "https://example.com/hook",
        "http://[::1]:8080/x",
        "http://localhost/",
        "ftp://example.com/",
        "http://user:pw@example.com/",
        "http://example.com:0/",
        "http://example.com:99999/",
        "http://",
        "http://[::1",
        "http://exa mple.com/",
        "not a url",
        "http://%zz/",
        "https://example.com/" + "p" * 2100,
        "javascript:alert(1)",
    ],
    "method": ["POST", "PUT", "PATCH", "GET", "post", "", "DELETE", "P\r\nOST"],
    "expression": [
        "*/5 * * * *",
        "0 0 * * *",
        "30 2 * * *",
        "@daily",
        "@hourly",
        "@reboot",
        "@every 5m",
        "0 30 2 * * *",
        "61 * * * *",
        "* * 31 2 *",
        "0 0 30 2 *",
        "0 0 L * *",
        "0 0 * * MON#9",
        "0 0 * * 8",
        "*/0 * * * *",
        "5-1 * * * *",
        "",
        "*",
        "a b c d e",
        "* * * * * * *",
        "0 0 29 2 *",
        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 * * * *",
        "* " * 200,
    ],
    "timezone": [
        "",
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Etc/GMT+14",
        "EST5EDT",
        "Mars/Olympus_Mons",
        "../../etc/passwd",
        "/etc/localtime",
        "localtime",
        "right/UTC",
        "posix/Europe/Berlin",
        "Factory",
        "UTC\x00",
        "Europe/" + "x" * 300,
        "europe/berlin",
    ],
    "topic": ["orders", ".", "..", "t" * 249, "t" * 250, "bad topic", ""],
    "page_token": [
        "",
        base64.urlsafe_b64encode(b"job-1").decode(),
        base64.urlsafe_b64encode(b"123\x1ffiring").decode(),
        base64.urlsafe_b64encode(b"-1\x1ffiring").decode(),
        base64.urlsafe_b64encode(b"99999999999999999999999999\x1fz").decode(),
        base64.urlsafe_b64encode("\u00b2\x1fz".encode()).decode(),  # superscript 2
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        base64.urlsafe_b64encode(b"a\x1fb\x1fc").decode(),
        "!!!",
        "===",
        "YQ",
    ],
    "firing_ids": ["", "f-1", "x" * 1000],
}
HEADER_NAMES = ["X-Test", "Host", "webhook-id", "bad name", "", "X-" + "h" * 300]
HEADER_VALUES = ["v", "a\r\nInjected: 1", "x" * 5000, "\x00"]
INT_POOLS: Mapping[str, list[int]] = {
    "google.protobuf.Timestamp.seconds": [
        _NOW_S,
        _NOW_S + 3600,
        _NOW_S - 86_400,
        0,
        -1,
        -62_135_596_800,  # 0001-01-01
        253_402_300_799,  # 9999-12-31T23:59:59
        253_402_300_800,  # 10000-01-01
        2**63 - 1,
        -(2**63),
    ],
    "google.protobuf.Timestamp.nanos": [0, 1, 999_999_999, 1_000_000_000, -1, 2**31 - 1],
    "google.protobuf.Duration.seconds": [
        0,
        1,
        30,
        3600,
        86_400 * 31,
        315_576_000_000,  # the documented Duration maximum
        315_576_000_001,
        -1,
        2**63 - 1,
        -(2**63),
    ],
    "google.protobuf.Duration.nanos": [0, 500_000_000, 999_999_999, 1_000_000_000, -1],
}
_INT_EDGES = [0, 1, -1, 2, 7, 100, 1000, 1001, 10**6, 2**31 - 1, -(2**31), 2**32 - 1, 2**63 - 1]


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64 travel as ten-byte two's complement
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field_key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return field_key(number, _LENGTH) + varint(len(payload)) + payload


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """Like st.one_of, with a relative weight per branch."""
    total = sum(w for w, _ in choices)

    @st.composite
    def pick(draw: st.DrawFn) -> T:
        n = draw(st.integers(0, total - 1))
        for w, strategy in choices:
            if n < w:
                return draw(strategy)
            n -= w
        raise AssertionError("unreachable")

    return pick()


def _text(pool: list[str] | None) -> Bytes:
    return weighted(
        (16 if pool else 0, st.sampled_from(pool or [""]).map(str.encode)),
        (4, st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass"))),
        (1, st.binary(max_size=40)),  # mostly not UTF-8
        (1, st.sampled_from([201, 1001, 70_000]).map(lambda n: b"x" * n)),
    )


def _integer(field: FieldDescriptor) -> st.SearchStrategy[int]:
    low, high = _INT_RANGES[field.type]
    edges = [n for n in _INT_EDGES if low <= n <= high]
    pool = INT_POOLS.get(field.full_name)
    if field.enum_type is not None:
        pool = [v.number for v in field.enum_type.values]
    return weighted(
        (8 if pool else 0, st.sampled_from(pool or [0])),
        (2, st.sampled_from(edges)),
        (1, st.integers(low, high)),
        (3, st.integers(max(low, -5), 3000)),
    )


def _zigzag(n: int, bits: int) -> int:
    return (n << 1) ^ (n >> (bits - 1))


def _scalar(field: FieldDescriptor) -> Bytes:
    """One occurrence of a non-message field, with its key."""
    n, t = field.number, field.type
    if t == FieldDescriptor.TYPE_STRING:
        if field.containing_type is not None and field.containing_type.GetOptions().map_entry:
            pool = HEADER_NAMES if field.name == "key" else HEADER_VALUES
            return _text(pool).map(lambda b: length_delimited(n, b))
        return _text(STRING_POOLS.get(field.name)).map(lambda b: length_delimited(n, b))
    if t == FieldDescriptor.TYPE_BYTES:
        sizes = st.one_of(st.binary(max_size=64), st.just(b"{}"), st.just(b"\x00" * 70_000))
        return sizes.map(lambda b: length_delimited(n, b))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.sampled_from([0, 1, 2, 2**64 - 1]).map(
            lambda v: field_key(n, _VARINT) + varint(v)
        )
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        fmt, wire = ("<d", _FIXED64) if t == FieldDescriptor.TYPE_DOUBLE else ("<f", _FIXED32)
        values = st.one_of(
            st.sampled_from([0.0, -0.0, 1.0, 2.0, 100.0, 1e6, 1e300, -1.0]),
            st.floats(allow_nan=True, allow_infinity=True, width=64 if fmt == "<d" else 32),
        )
        return values.map(lambda v: field_key(n, wire) + struct.pack(fmt, v))
    ints = _integer(field)
    if t in (FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64):
        bits = 32 if t == FieldDescriptor.TYPE_SINT32 else 64
        return ints.map(lambda v: field_key(n, _VARINT) + varint(_zigzag(v, bits)))
    if t in (FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32):
        return ints.map(lambda v: field_key(n, _FIXED32) + struct.pack("<I", v & 0xFFFFFFFF))
    if t in (FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64):
        return ints.map(lambda v: field_key(n, _FIXED64) + struct.pack("<Q", v & (2**64 - 1)))
    return ints.map(lambda v: field_key(n, _VARINT) + varint(v))


def _one(field: FieldDescriptor, depth: int) -> Bytes:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message(field.message_type, depth + 1).map(
            lambda b: length_delimited(field.number, b)
        )
    return _scalar(field)


@st.composite
def _field(draw: st.DrawFn, field: FieldDescriptor, depth: int, present: int) -> bytes:
    """Every occurrence of one field: absent (unless `present` in 12 draws), once or a
    few times, or very many times."""
    how = draw(st.integers(0, 11))
    if how >= present:
        return b""
    one = _one(field, depth)
    if how > 0:
        count = draw(st.integers(1, 3)) if field.is_repeated else 1
        return b"".join(draw(one) for _ in range(count))
    if not field.is_repeated:
        return draw(one) + draw(one)  # a singular field sent twice: the last one wins
    first = draw(one)
    # Far more entries than allowed (batch and id limits are 1000); nested, only a few
    # dozen, as copies multiply. Never much past the 8 MiB message limit.
    count = draw(st.sampled_from([1001, 5000])) if depth == 0 else draw(st.integers(4, 40))
    return first * min(count, MAX_REPEATED_BYTES // max(1, len(first)) + 1)


class Body(bytes):
    """A serialized request whose repr stays short in hypothesis' failure reports."""

    def __repr__(self) -> str:
        head = bytes(self[:160])
        return f"Body({head!r}{'...' if len(self) > 160 else ''}, {len(self)} bytes)"


def request(descriptor: Descriptor) -> st.SearchStrategy[Body]:
    return message(descriptor).map(Body)


@functools.cache
def message(descriptor: Descriptor, depth: int = 0) -> Bytes:
    """Serialized instances of `descriptor`: message fields present more often than
    scalars, usually one member per oneof, and unknown fields now and then."""
    if depth > MAX_DEPTH:
        return st.just(b"")
    parts: list[Bytes] = []
    for oneof in descriptor.oneofs:
        members = [_field(f, depth, 11) for f in oneof.fields]
        parts.append(
            weighted(
                (8, st.one_of(*members)),
                (1, st.just(b"")),
                (1, st.tuples(*members).map(b"".join)),
            )
        )
    for f in descriptor.fields:
        if f.containing_oneof is None:
            parts.append(_field(f, depth, 10 if f.type == FieldDescriptor.TYPE_MESSAGE else 6))
    unknown = weighted(
        (9, st.just(b"")), (1, st.binary(max_size=16).map(lambda b: length_delimited(999, b)))
    )
    return st.tuples(*parts, unknown).map(b"".join)


def _paths(descriptor: Descriptor, depth: int = 0) -> list[tuple[FieldDescriptor, ...]]:
    """Every chain of fields from `descriptor` down to a leaf (maps and repeated
    fields count as leaves; their entries are generated whole)."""
    chains: list[tuple[FieldDescriptor, ...]] = []
    for f in descriptor.fields:
        chains.append((f,))
        if f.message_type is not None and not f.is_repeated and depth < MAX_DEPTH:
            chains.extend((f, *rest) for rest in _paths(f.message_type, depth + 1))
    return chains


def _wrap(chain: tuple[FieldDescriptor, ...], leaf: bytes) -> bytes:
    for parent in reversed(chain[:-1]):
        leaf = length_delimited(parent.number, leaf)
    return leaf


@functools.cache
def override(descriptor: Descriptor) -> Bytes:
    """One field anywhere in the tree, set to a generated value. Appended to a valid
    request it replaces that field (protobuf: the last value of a singular field wins,
    and messages merge), so the rest of the request stays valid and validation of the
    field itself is reached."""
    chains = _paths(descriptor)
    if not chains:  # a message without fields: all a client can add is unknown fields
        return st.binary(max_size=64).map(lambda b: length_delimited(999, b))
    return st.sampled_from(chains).flatmap(
        lambda chain: _field(chain[-1], len(chain) - 1, 12).map(lambda b: _wrap(chain, b))
    )


def mutated(seed: bytes, descriptor: Descriptor) -> st.SearchStrategy[Body]:
    """A valid request with one to three fields replaced by generated values."""
    return st.lists(override(descriptor), min_size=1, max_size=3).map(
        lambda parts: Body(seed + b"".join(parts))
    )
