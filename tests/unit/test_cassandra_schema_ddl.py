"""How `schema.migrate` sends a group of DDL statements (`_ddl_on_one_node`): to the
control connection's node, without the driver's wait after each, then one wait for
agreement; one by one without a control connection; an error if the control
connection moved. The driver is faked here; the statements run against real nodes in
tests/integration/test_cassandra_schema.py and on the three-node cluster in every
nemesis test's keyspace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge, schema


class Host:
    def __init__(self, name: str, up: bool = True) -> None:
        self.name, self.is_up = name, up


class ControlConnection:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def wait_for_schema_agreement(self) -> bool:
        self.cluster.events.append(("agreement", self.cluster.max_schema_agreement_wait))
        if self.cluster.move_to is not None:
            self.cluster.control_host = self.cluster.move_to
        return self.cluster.agreed


class FakeCluster:
    def __init__(self, control_host: Host | None) -> None:
        self.control_host = control_host
        self.max_schema_agreement_wait = 60
        self.agreed = True
        self.move_to: Host | None = None
        self.events: list[tuple[Any, ...]] = []
        self.control_connection = ControlConnection(self)

    def get_control_connection_host(self) -> Host | None:
        return self.control_host


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    made = FakeCluster(Host("node1"))

    async def execute(
        session: Any, statement: Any, params: Sequence[Any] | None = None, **kw: Any
    ) -> None:
        host = kw.get("host")
        made.events.append(
            ("execute", statement, host.name if host else None, made.max_schema_agreement_wait)
        )

    monkeypatch.setattr(bridge, "execute", execute)
    return made


STATEMENTS = ["CREATE TABLE ks.a (k int PRIMARY KEY)", "CREATE INDEX ON ks.a (v)"]


async def test_statements_go_to_the_control_node_then_one_wait(cluster: FakeCluster) -> None:
    await schema._ddl_on_one_node(cluster, None, STATEMENTS)
    assert cluster.events == [
        ("execute", STATEMENTS[0], "node1", 0),
        ("execute", STATEMENTS[1], "node1", 0),
        ("agreement", 60),
    ]
    assert cluster.max_schema_agreement_wait == 60


async def test_without_a_control_connection_each_statement_is_waited_for(
    cluster: FakeCluster,
) -> None:
    for control in (None, Host("node2", up=False)):
        cluster.control_host, cluster.events = control, []
        await schema._ddl_on_one_node(cluster, None, STATEMENTS)
        # The driver waits after each statement itself: its setting is left as it is.
        assert cluster.events == [
            ("execute", STATEMENTS[0], None, 60),
            ("execute", STATEMENTS[1], None, 60),
        ]


async def test_no_agreement_is_an_error(cluster: FakeCluster) -> None:
    cluster.agreed = False
    with pytest.raises(StoreUnavailable, match="did not agree"):
        await schema._ddl_on_one_node(cluster, None, STATEMENTS)


async def test_a_control_connection_that_moved_proves_nothing(cluster: FakeCluster) -> None:
    cluster.move_to = Host("node3")
    with pytest.raises(StoreUnavailable, match="control connection left"):
        await schema._ddl_on_one_node(cluster, None, STATEMENTS)
    assert cluster.max_schema_agreement_wait == 60
