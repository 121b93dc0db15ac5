"""What Clockwork needs of each Cassandra node's settings, checked when a store opens.

Two kinds of setting matter (docs/operations.md, "Cassandra settings"):

- limits below what Clockwork sends, so the node refuses its requests: the batch size
  fail threshold (the worker's batched upserts and the api's conditional batches of
  creates carry up to `DEFAULT_MAX_BYTES` of values) and the two guardrails a
  coalesced schedule read meets (`part IN (...) AND key IN (...)`);
- memtables on the heap: Clockwork's rows hold ~15 small cells each, and on the heap
  each cell's objects cost several times what Cassandra counts against
  `memtable_heap_space`, so a sustained create load can fill the heap before the
  memtables flush;
- the first Paxos protocol (`paxos_variant: v1`, Cassandra's default): creates share
  a tenant's 64 partitions, so concurrent creates contend for each partition's Paxos
  round, and under v1 many more of those rounds time out.

`findings` judges one node's settings (no I/O); `check` reads every node's
`system_views.settings` (one query per node) and logs what it found. The check never
stops a process: a node it cannot read (an older Cassandra, a login without access to
`system_views`, a node down) is logged at INFO and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from clockwork_svc.storage.cassandra import bridge
from clockwork_svc.storage.cassandra.read_batcher import DEFAULT_MAX_KEYS
from clockwork_svc.storage.cassandra.rows import SCHEDULE_PARTS
from clockwork_svc.storage.cassandra.write_batcher import DEFAULT_MAX_BYTES

log = logging.getLogger(__name__)

DOC = "docs/operations.md#cassandra-settings"

ON_HEAP_MEMTABLES = frozenset(
    {"heap_buffers", "unslabbed_heap_buffers", "unslabbed_heap_buffers_logged"}
)
"""`memtable_allocation_type` values that keep memtable cells on the heap."""

PARTITIONS_PER_READ = min(DEFAULT_MAX_KEYS, SCHEDULE_PARTS)
"""Partitions one coalesced schedule read names at most (`part IN (...)`)."""

CARTESIAN_PER_READ = DEFAULT_MAX_KEYS * PARTITIONS_PER_READ
"""Partitions times keys of one coalesced schedule read at most."""

_QUERY = "SELECT name, value FROM system_views.settings"
_TIMEOUT_S = 5.0
_POOL_POLL_S = 0.1
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$")
_UNIT = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


class Severity(Enum):
    ERROR = "error"
    """The node refuses some of Clockwork's requests."""
    WARNING = "warning"
    """The node can fail under load Clockwork accepts."""


@dataclass(frozen=True, slots=True)
class Finding:
    setting: str
    value: str
    severity: Severity
    why: str


def findings(settings: Mapping[str, str]) -> list[Finding]:
    """What in one node's settings (`system_views.settings`: name to value) would
    refuse Clockwork's requests or fail under its load. A setting missing or
    unreadable is not judged."""
    out: list[Finding] = []
    allocation = settings.get("memtable_allocation_type")
    if allocation in ON_HEAP_MEMTABLES:
        out.append(
            Finding(
                "memtable_allocation_type",
                allocation,
                Severity.WARNING,
                "memtable cells on the heap cost several times what Cassandra counts for "
                "Clockwork's rows, so a sustained create load can fill the heap before the "
                "memtables flush; set offheap_objects",
            )
        )
    if settings.get("paxos_variant") == "v1":
        out.append(
            Finding(
                "paxos_variant",
                "v1",
                Severity.WARNING,
                "compare-and-sets take four round trips instead of two, and concurrent "
                "creates, which contend for a tenant's partitions, time out far more "
                "often; set v2 on every node",
            )
        )
    batch_limit = _batch_fail_threshold(settings)
    if batch_limit is not None and batch_limit[1] <= DEFAULT_MAX_BYTES:
        out.append(
            Finding(
                "batch_size_fail_threshold",
                batch_limit[0],
                Severity.ERROR,
                f"Clockwork's batches carry up to {DEFAULT_MAX_BYTES // 1024} KiB of values; "
                "the node refuses larger ones than this (the default, 50KiB, is enough)",
            )
        )
    for name, needed, what in (
        ("partition_keys_in_select_fail_threshold", PARTITIONS_PER_READ, "partitions"),
        ("in_select_cartesian_product_fail_threshold", CARTESIAN_PER_READ, "partitions x keys"),
    ):
        limit = _int(settings.get(name))
        if limit is not None and 0 <= limit < needed:
            out.append(
                Finding(
                    name,
                    settings[name],
                    Severity.ERROR,
                    f"a worker's coalesced schedule read names up to {needed} {what}; "
                    "the node refuses it above this (leave the guardrail at -1, off)",
                )
            )
    return out


async def check(cluster: Any, session: Any) -> dict[str, list[Finding]]:
    """Read every up node's settings, log the findings (one line per finding, naming
    the nodes that share it) and return them by node address; nodes not read are
    left out."""
    hosts = [h for h in cluster.metadata.all_hosts() if h.is_up is not False]
    results = await asyncio.gather(*(read_settings(session, h) for h in hosts))
    by_node = {
        str(h.endpoint): findings(settings)
        for h, settings in zip(hosts, results, strict=True)
        if settings is not None
    }
    log_findings(by_node)
    return by_node


async def read_settings(session: Any, host: Any) -> dict[str, str] | None:
    """One node's `system_views.settings` (name to value), or None (logged at INFO)
    when it cannot be read within _TIMEOUT_S.

    The driver's connect returns once one node's connection pool is open and opens the
    others' after: a request pinned to a node without its pool yet fails at once, so
    it is sent again while that node is not marked down."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _TIMEOUT_S
    while True:
        try:
            request = bridge.execute(session, _QUERY, host=host)
            page = await asyncio.wait_for(request, max(0.0, deadline - loop.time()))
        except Exception as exc:  # noqa: BLE001 - any failure only skips the check
            opening = host.is_up is not False and host not in session.get_pool_state()
            if opening and loop.time() + _POOL_POLL_S < deadline:
                await asyncio.sleep(_POOL_POLL_S)
                continue
            log.info("cassandra node %s: settings not checked: %s", host.endpoint, exc)
            return None
        return {str(r["name"]): str(r["value"]) for r in page.rows if r["value"] is not None}


def log_findings(by_node: Mapping[str, list[Finding]]) -> None:
    """One line per finding (ERROR or WARNING by its severity), naming its nodes."""
    nodes: dict[Finding, list[str]] = {}
    for node, found in sorted(by_node.items()):
        for f in found:
            nodes.setdefault(f, []).append(node)
    for f, where in nodes.items():
        level = logging.ERROR if f.severity is Severity.ERROR else logging.WARNING
        log.log(
            level,
            "cassandra node(s) %s: %s = %s: %s (%s)",
            ", ".join(where),
            f.setting,
            f.value,
            f.why,
            DOC,
        )


def _batch_fail_threshold(settings: Mapping[str, str]) -> tuple[str, int] | None:
    """`batch_size_fail_threshold` as the node gives it, and in bytes (Cassandra 4.1+:
    "50KiB"; before: the `_in_kb` name, a number of KiB); None if absent or unreadable."""
    if "batch_size_fail_threshold" in settings:
        value = settings["batch_size_fail_threshold"]
        size = _size(value)
    else:
        value = settings.get("batch_size_fail_threshold_in_kb", "")
        kib = _int(value)
        size = None if kib is None else kib * 1024
    return None if size is None else (value, size)


def _size(value: str) -> int | None:
    match = _SIZE.match(value)
    return None if match is None else int(match.group(1)) * _UNIT[match.group(2)]


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None
