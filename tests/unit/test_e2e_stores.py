"""How tests and benchmarks reach a store (e2e/stores.py): the harness's variables for
a secured server become Clockwork's own variables for its processes, unchanged."""

from __future__ import annotations

from pathlib import Path

from e2e.stores import CassandraAccess, EtcdAccess

CLUSTER_ENV = {
    "CLOCKWORK_CASSANDRA_CLUSTER": "127.0.0.2:9142,127.0.0.3:9142",
    "CLOCKWORK_CASSANDRA_CLUSTER_TLS_CA": "/pki/ca.crt",
    "CLOCKWORK_CASSANDRA_CLUSTER_TLS_CERT": "/pki/client.crt",
    "CLOCKWORK_CASSANDRA_CLUSTER_TLS_KEY": "/pki/client.key",
    "CLOCKWORK_CASSANDRA_CLUSTER_USER": "clockwork",
    "CLOCKWORK_CASSANDRA_CLUSTER_PASSWORD": "secret",
    "CLOCKWORK_ETCD_CLUSTER": "127.0.0.1:2379,127.0.0.1:2380",
    "CLOCKWORK_ETCD_CLUSTER_TLS_CA": "/etcd/ca.crt",
    "CLOCKWORK_ETCD_CLUSTER_TLS_CERT": "/etcd/clockwork.crt",
    "CLOCKWORK_ETCD_CLUSTER_TLS_KEY": "/etcd/clockwork.key",
}


def test_a_secured_cassandra_reaches_clockwork_as_its_own_flags() -> None:
    access = CassandraAccess.from_env("CLOCKWORK_CASSANDRA_CLUSTER", CLUSTER_ENV)
    assert access.contact_points == ("127.0.0.2:9142", "127.0.0.3:9142")
    assert access.tls is not None and access.tls.cert_file == Path("/pki/client.crt")
    assert access.env() == {
        "CLOCKWORK_CASSANDRA": "127.0.0.2:9142,127.0.0.3:9142",
        "CLOCKWORK_CASSANDRA_USER": "clockwork",
        "CLOCKWORK_CASSANDRA_PASSWORD": "secret",
        "CLOCKWORK_CASSANDRA_TLS": "true",
        "CLOCKWORK_CASSANDRA_TLS_CA": "/pki/ca.crt",
        "CLOCKWORK_CASSANDRA_TLS_CERT": "/pki/client.crt",
        "CLOCKWORK_CASSANDRA_TLS_KEY": "/pki/client.key",
    }
    assert access.connect_kwargs() == {
        "username": "clockwork",
        "password": "secret",
        "tls": access.tls,
    }
    login = access.cql_login()
    assert login is not None and (login.role, login.password) == ("clockwork", "secret")
    # What the variables give back is the same access (scripts/test-replicated.sh
    # points CLOCKWORK_CASSANDRA* at the cluster this way).
    assert CassandraAccess.from_env("CLOCKWORK_CASSANDRA", access.env()) == access


def test_a_plain_cassandra_needs_only_its_addresses() -> None:
    access = CassandraAccess.of("127.0.0.1:9042")
    assert access == CassandraAccess.from_env("CLOCKWORK_CASSANDRA", access.env())
    assert access.env() == {"CLOCKWORK_CASSANDRA": "127.0.0.1:9042"}
    assert access.ssl_context() is None and access.cql_login() is None
    assert CassandraAccess.of(access) is access


def test_a_secured_etcd_reaches_clockwork_as_its_own_flags() -> None:
    access = EtcdAccess.from_env("CLOCKWORK_ETCD_CLUSTER", CLUSTER_ENV)
    assert access.endpoints == "127.0.0.1:2379,127.0.0.1:2380"
    tls = access.security.tls
    assert tls is not None and tls.key_file == Path("/etcd/clockwork.key")
    assert access.security.username is None  # the certificate's CN is the user
    assert access.env() == {
        "CLOCKWORK_ETCD": "127.0.0.1:2379,127.0.0.1:2380",
        "CLOCKWORK_ETCD_TLS_CA": "/etcd/ca.crt",
        "CLOCKWORK_ETCD_TLS_CERT": "/etcd/clockwork.crt",
        "CLOCKWORK_ETCD_TLS_KEY": "/etcd/clockwork.key",
    }
    assert EtcdAccess.from_env("CLOCKWORK_ETCD", access.env()) == access
    assert EtcdAccess.of("127.0.0.1:2379").env() == {"CLOCKWORK_ETCD": "127.0.0.1:2379"}
