"""The replicated stores run secured, as docs/operations.md tells production to run
them (e2e/infra/cassandra_cluster.py, etcd_cluster.py): every Cassandra node and every
etcd member refuses a plain-text client, a login with a wrong password is refused,
and Clockwork's roles reach only what Clockwork needs. Clockwork itself reaches them
through TLS and its logins in the whole replicated suite (tests/contract,
tests/nemesis/test_replicated_stores.py)."""

from __future__ import annotations

import pytest

from e2e.infra import cql
from e2e.infra.etcd import http_json
from e2e.infra.etcd_cluster import ClusterMember
from e2e.infra.group import RunningGroup
from e2e.infra.server import InfraError, ProbeError
from e2e.stores import CassandraAccess

pytestmark = [pytest.mark.cassandra, pytest.mark.replicated]


def test_every_cassandra_node_refuses_plain_text_and_a_wrong_password(
    cassandra_nodes: RunningGroup,
) -> None:
    access = CassandraAccess.from_env("CLOCKWORK_CASSANDRA_CLUSTER")
    login = access.cql_login()
    assert login is not None and access.tls is not None
    for node in cassandra_nodes.members:
        with pytest.raises((OSError, cql.CqlError)):
            cql.release_version(node.host, node.port, 5.0)
        with pytest.raises(cql.CqlError, match="0x0100"):  # Bad credentials
            cql.release_version(
                node.host,
                node.port,
                5.0,
                tls=access.ssl_context(),
                login=cql.Login(login.role, "not-the-password"),
            )
        version = cql.release_version(
            node.host, node.port, 5.0, tls=access.ssl_context(), login=login
        )
        assert version.startswith("5.")


def test_clockworks_cassandra_role_reads_no_roles(cassandra_nodes: RunningGroup) -> None:
    access = CassandraAccess.from_env("CLOCKWORK_CASSANDRA_CLUSTER")
    node = cassandra_nodes.members[0]
    with pytest.raises(cql.CqlError, match="no SELECT permission"):
        cql.execute(
            node.host,
            node.port,
            "SELECT role FROM system_auth.roles",
            tls=access.ssl_context(),
            login=access.cql_login(),
        )


def test_every_etcd_member_refuses_plain_text(etcd_members: RunningGroup) -> None:
    for member in etcd_members.members:
        with pytest.raises((OSError, ProbeError)) as refused:
            http_json(f"http://{member.address}/version", None, 5.0)
        print(f"{member.address} in plain text: {refused.value}")


def test_clockworks_etcd_user_writes_only_under_its_prefix(etcd_members: RunningGroup) -> None:
    member = etcd_members.members[0]
    server = member.server
    assert isinstance(server, ClusterMember)
    server.etcdctl(member.port, "put", "/clockwork/security-test", "1", user="clockwork")
    server.etcdctl(member.port, "del", "/clockwork/security-test", user="clockwork")
    with pytest.raises(InfraError, match="permission denied"):
        server.etcdctl(member.port, "put", "/elsewhere/security-test", "1", user="clockwork")
    with pytest.raises(InfraError, match="permission denied"):
        server.etcdctl(member.port, "get", "/clockwork/x", user="stranger")
