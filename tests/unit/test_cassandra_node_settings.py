"""Judging a Cassandra node's settings (storage/cassandra/node_settings.py): what
refuses Clockwork's requests, what fails under its load, and what is left alone. The
read from a real node is tests/integration/test_cassandra_node_settings.py."""

from __future__ import annotations

import logging

import pytest

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge
from clockwork_svc.storage.cassandra.node_settings import (
    CARTESIAN_PER_READ,
    PARTITIONS_PER_READ,
    Finding,
    Severity,
    findings,
    log_findings,
    read_settings,
)

# Cassandra 5.0's own defaults for the settings judged (Config.java, stock yaml).
STOCK = {
    "memtable_allocation_type": "heap_buffers",
    "batch_size_fail_threshold": "50KiB",
    "partition_keys_in_select_fail_threshold": "-1",
    "in_select_cartesian_product_fail_threshold": "-1",
    "paxos_variant": "v1",
}
# What docs/operations.md asks for (and the test harness runs).
ADVISED = STOCK | {"memtable_allocation_type": "offheap_objects", "paxos_variant": "v2"}


def judged(**changes: str) -> list[tuple[str, str, Severity]]:
    return [(f.setting, f.value, f.severity) for f in findings(ADVISED | changes)]


def test_the_advised_settings_have_no_finding() -> None:
    assert findings(ADVISED) == []


def test_stock_settings_warn_of_memtables_on_the_heap_and_the_first_paxos() -> None:
    memtables, paxos = findings(STOCK)
    assert (memtables.setting, memtables.value, memtables.severity) == (
        "memtable_allocation_type",
        "heap_buffers",
        Severity.WARNING,
    )
    assert "offheap_objects" in memtables.why
    assert (paxos.setting, paxos.value, paxos.severity) == ("paxos_variant", "v1", Severity.WARNING)
    assert "set v2" in paxos.why


def test_paxos_v1_alone_warns() -> None:
    assert judged(paxos_variant="v1") == [("paxos_variant", "v1", Severity.WARNING)]


@pytest.mark.parametrize("kind", ["unslabbed_heap_buffers", "unslabbed_heap_buffers_logged"])
def test_every_on_heap_allocation_type_warns(kind: str) -> None:
    assert judged(memtable_allocation_type=kind) == [
        ("memtable_allocation_type", kind, Severity.WARNING)
    ]


@pytest.mark.parametrize("kind", ["offheap_buffers", "offheap_objects"])
def test_off_heap_allocation_types_pass(kind: str) -> None:
    assert judged(memtable_allocation_type=kind) == []


@pytest.mark.parametrize("value", ["16KiB", "24KiB", "24576B", "24576"])
def test_a_batch_limit_at_or_below_clockworks_batches_is_an_error(value: str) -> None:
    assert judged(batch_size_fail_threshold=value) == [
        ("batch_size_fail_threshold", value, Severity.ERROR)
    ]


@pytest.mark.parametrize("value", ["25KiB", "50KiB", "1MiB", "1GiB"])
def test_a_batch_limit_above_clockworks_batches_passes(value: str) -> None:
    assert judged(batch_size_fail_threshold=value) == []


def test_the_pre_4_1_batch_limit_name_counts_kib() -> None:
    old = {k: v for k, v in ADVISED.items() if k != "batch_size_fail_threshold"}
    assert findings(old | {"batch_size_fail_threshold_in_kb": "50"}) == []
    [found] = findings(old | {"batch_size_fail_threshold_in_kb": "20"})
    assert (found.setting, found.value, found.severity) == (
        "batch_size_fail_threshold",
        "20",
        Severity.ERROR,
    )


@pytest.mark.parametrize(
    ("name", "needed"),
    [
        ("partition_keys_in_select_fail_threshold", PARTITIONS_PER_READ),
        ("in_select_cartesian_product_fail_threshold", CARTESIAN_PER_READ),
    ],
)
def test_guardrails_below_a_coalesced_read_are_errors(name: str, needed: int) -> None:
    assert judged(**{name: str(needed - 1)}) == [(name, str(needed - 1), Severity.ERROR)]
    assert judged(**{name: "0"}) == [(name, "0", Severity.ERROR)]
    assert judged(**{name: str(needed)}) == []
    assert judged(**{name: "-1"}) == []


def test_a_coalesced_read_names_at_most_64_partitions_and_4096_pairs() -> None:
    assert (PARTITIONS_PER_READ, CARTESIAN_PER_READ) == (64, 4096)


def test_missing_or_unreadable_settings_are_not_judged() -> None:
    assert findings({}) == []
    assert (
        findings(
            {
                "batch_size_fail_threshold": "lots",
                "partition_keys_in_select_fail_threshold": "",
                "in_select_cartesian_product_fail_threshold": "null",
            }
        )
        == []
    )


def test_one_line_per_finding_names_every_node_that_has_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heap = findings(STOCK)[0]
    guard = Finding("in_select_cartesian_product_fail_threshold", "100", Severity.ERROR, "x")
    caplog.set_level(logging.INFO, logger="clockwork_svc.storage.cassandra.node_settings")
    log_findings({"10.0.0.2:9042": [heap], "10.0.0.1:9042": [heap, guard], "10.0.0.3:9042": []})
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 2
    assert lines[0][0] == "WARNING"
    assert lines[0][1].startswith(
        "cassandra node(s) 10.0.0.1:9042, 10.0.0.2:9042: memtable_allocation_type = heap_buffers"
    )
    assert lines[1][0] == "ERROR"
    assert lines[1][1].startswith(
        "cassandra node(s) 10.0.0.1:9042: in_select_cartesian_product_fail_threshold = 100: x"
    )
    assert all("docs/operations.md#cassandra-settings" in m for _, m in lines)


def test_no_finding_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="clockwork_svc.storage.cassandra.node_settings")
    log_findings({"10.0.0.1:9042": []})
    assert caplog.records == []


class _Host:
    def __init__(self, endpoint: str, is_up: bool | None) -> None:
        self.endpoint = endpoint
        self.is_up = is_up


class _Session:
    """A node's pool opens by the `opens_after`th request to it, as the driver opens
    pools after connect returns; a request to a node without one fails at once."""

    def __init__(self, opens_after: int) -> None:
        self.opens_after = opens_after
        self.pools: set[_Host] = set()
        self.requests = 0

    def get_pool_state(self) -> dict[_Host, object]:
        return {h: {} for h in self.pools}

    async def execute(self, session: object, statement: str, *, host: _Host) -> bridge.Page:
        self.requests += 1
        if self.requests >= self.opens_after:
            self.pools.add(host)
        if host not in self.pools:
            raise StoreUnavailable("NoHostAvailable: Host has been marked down or removed")
        return bridge.Page([{"name": "memtable_allocation_type", "value": "offheap_objects"}], None)


async def test_a_node_whose_pool_is_still_opening_is_read_once_it_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = _Session(opens_after=3)
    monkeypatch.setattr(bridge, "execute", session.execute)
    got = await read_settings(session, _Host("10.0.0.2:9042", True))
    assert got == {"memtable_allocation_type": "offheap_objects"}
    assert session.requests == 3


async def test_a_node_marked_down_is_not_waited_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    session = _Session(opens_after=1_000)
    monkeypatch.setattr(bridge, "execute", session.execute)
    with caplog.at_level(logging.INFO, logger="clockwork_svc.storage.cassandra.node_settings"):
        assert await read_settings(session, _Host("10.0.0.3:9042", False)) is None
    assert session.requests == 1
    assert "10.0.0.3:9042: settings not checked" in caplog.text
