"""The settings check (storage/cassandra/node_settings.py) on the harness's real node:
it reads each node's `system_views.settings`, finds nothing to report on the settings
the harness runs with (docs/operations.md, "Cassandra settings"), and a node it
cannot read is logged and skipped: a store still opens."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from clockwork_svc.storage.cassandra import connecting, node_settings
from clockwork_svc.storage.cassandra.store import CassandraStore
from tests.conftest import require_server
from tests.contract.conftest import LAYOUT

pytestmark = pytest.mark.cassandra

LOGGER = "clockwork_svc.storage.cassandra.node_settings"


@pytest.fixture
async def connected() -> AsyncIterator[tuple[Any, Any]]:
    address = require_server("CLOCKWORK_CASSANDRA")
    cluster, session = await connecting.connect([address], timeout_s=30)
    yield cluster, session
    await connecting.shutdown(cluster)


@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node answers the settings query with an error (a table it lacks)."""
    monkeypatch.setattr(node_settings, "_QUERY", "SELECT name, value FROM system_views.nosuch")


async def test_reads_each_nodes_settings(connected: tuple[Any, Any]) -> None:
    cluster, session = connected
    hosts = list(cluster.metadata.all_hosts())
    assert hosts
    for host in hosts:
        settings = await node_settings.read_settings(session, host)
        assert settings is not None
        assert settings["memtable_allocation_type"] == "offheap_objects"
        assert settings["batch_size_fail_threshold"] == "50KiB"
        assert settings["paxos_variant"] == "v2"
        assert node_settings.findings(settings) == []


async def test_the_harness_node_has_nothing_to_report(
    connected: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, session = connected
    caplog.set_level(logging.INFO, logger=LOGGER)
    by_node = await node_settings.check(cluster, session)
    assert set(by_node) == {str(h.endpoint) for h in cluster.metadata.all_hosts()}
    assert all(found == [] for found in by_node.values())
    assert [r for r in caplog.records if r.name == LOGGER] == []


@pytest.mark.usefixtures("unreadable")
async def test_a_node_that_cannot_be_read_is_skipped(
    connected: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, session = connected
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert await node_settings.check(cluster, session) == {}
    [line] = [r for r in caplog.records if r.name == LOGGER]
    assert line.levelno == logging.INFO
    assert "settings not checked" in line.getMessage()
    assert "nosuch" in line.getMessage()


@pytest.mark.usefixtures("unreadable")
async def test_a_store_opens_when_the_settings_cannot_be_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from clockwork_svc.storage import cassandra

    address = require_server("CLOCKWORK_CASSANDRA")
    keyspace = "settings_" + uuid.uuid4().hex[:10]
    await cassandra.create_cluster_for_tests([address], keyspace, LAYOUT)
    caplog.set_level(logging.INFO, logger=LOGGER)
    try:
        store = await CassandraStore.open([address], keyspace)
        try:
            assert await store.layout() == LAYOUT
        finally:
            await store.close()
    finally:
        await cassandra.drop_keyspace_for_tests([address], keyspace)
    assert any("settings not checked" in r.getMessage() for r in caplog.records)
