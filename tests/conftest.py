"""Shared fixtures.

Tests that need a real server read its address from the environment
(`CLOCKWORK_CASSANDRA`, set by `python -m e2e.infra up`, which the README's test
command runs). Without it they skip on a laptop, but fail under CI
(`CI=true` or `CLOCKWORK_REQUIRE_INFRA=1`) so a missing server never passes silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from e2e.infra import cassandra_cluster, etcd_cluster
from e2e.infra.group import RunningGroup
from e2e.stores import CassandraAccess, EtcdAccess


def require_server(env_var: str) -> str:
    value = os.environ.get(env_var, "")
    if value:
        return value
    if os.environ.get("CI") == "true" or os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
        pytest.fail(f"{env_var} is not set: start the servers with `python -m e2e.infra up`")
    pytest.skip(f"{env_var} not set (run `make infra-up`)")


def require_stores() -> tuple[CassandraAccess, EtcdAccess]:
    """The Cassandra and etcd that `CLOCKWORK_CASSANDRA` and `CLOCKWORK_ETCD` name, with
    the TLS and login their companion variables give (e2e/stores.py): the single test
    servers, or the secured clusters when scripts/test-replicated.sh points them there."""
    require_server("CLOCKWORK_CASSANDRA")
    require_server("CLOCKWORK_ETCD")
    return CassandraAccess.from_env("CLOCKWORK_CASSANDRA"), EtcdAccess.from_env("CLOCKWORK_ETCD")


@pytest.fixture
def cassandra_nodes() -> Iterator[RunningGroup]:
    """The three-node Cassandra (`python -m e2e.infra up cassandra-cluster`); a node the
    test killed is restarted after it."""
    require_server("CLOCKWORK_CASSANDRA_CLUSTER")
    group = cassandra_cluster.attach()
    assert group is not None, "the Cassandra cluster's members are not all running"
    yield group
    group.restore()


@pytest.fixture
def etcd_members() -> Iterator[RunningGroup]:
    """The three-member etcd (`python -m e2e.infra up etcd-cluster`); a member the test
    killed is restarted after it."""
    require_server("CLOCKWORK_ETCD_CLUSTER")
    group = etcd_cluster.attach()
    assert group is not None, "the etcd cluster's members are not all running"
    yield group
    group.restore()
