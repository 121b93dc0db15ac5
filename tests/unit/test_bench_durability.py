"""Benchmarks compare schedulers at one durability: Redis's AOF policy follows the
Cassandra node's commit log sync, and the harness launches either kind of node."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.durability import Durability
from e2e.infra.__main__ import _parser, _select
from e2e.infra.cassandra import Cassandra

PORTS = {"storage": 7000, "native": 9042}


@pytest.mark.parametrize(
    ("commitlog_sync", "appendfsync"),
    [("batch", "always"), ("group", "always"), ("periodic", "everysec")],
)
def test_redis_syncs_its_log_as_often_as_cassandra(commitlog_sync: str, appendfsync: str) -> None:
    assert Durability(commitlog_sync, "").redis_appendfsync == appendfsync


def test_the_description_names_each_stores_setting() -> None:
    stores = Durability("periodic", "10000ms")
    assert stores.cassandra() == "Cassandra commitlog_sync=periodic (10000ms)"
    assert stores.describe() == (
        "Cassandra commitlog_sync=periodic (10000ms); "
        "Redis appendonly yes, appendfsync everysec; SQLite synchronous=FULL"
    )
    assert Durability("batch", "").cassandra() == "Cassandra commitlog_sync=batch"


def test_infra_up_launches_a_relaxed_node_only_when_asked(tmp_path: Path) -> None:
    parser = _parser()
    for argv, expected in [
        (["up", "cassandra", "etcd"], "commitlog_sync: batch\n"),
        (["down", "cassandra"], "commitlog_sync: batch\n"),  # the option is up's only
        (
            ["up", "cassandra", "--cassandra-commitlog-sync", "periodic"],
            "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms\n",
        ),
        (
            ["up", "cassandra", "--cassandra-commitlog-sync", "group"],
            "commitlog_sync: group\ncommitlog_sync_group_window: 10ms\n",
        ),
    ]:
        args = parser.parse_args(argv)
        servers = _select(args.servers, tmp_path, tmp_path, args.cassandra_commitlog_sync)
        cassandra = servers[0]
        assert isinstance(cassandra, Cassandra)
        assert expected in cassandra._yaml(PORTS)


def test_infra_up_refuses_an_unknown_sync_mode() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["up", "--cassandra-commitlog-sync", "never"])
