"""The secured test node's generated configuration (e2e/infra/cassandra_secure.py):
TLS required on the native port with client certificates, logins and permissions on.
The node itself runs under tests/integration/test_cassandra_security.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.infra.cassandra_secure import SecureCassandra

PORTS = {"native": 29042, "storage": 27000}


def test_tls_is_required_with_client_certificates_and_logins(tmp_path: Path) -> None:
    node = SecureCassandra(tmp_path / "state", tmp_path / "cache")
    config = yaml.safe_load(node._yaml(PORTS))
    assert config["authenticator"] == "PasswordAuthenticator"
    assert config["authorizer"] == "CassandraAuthorizer"
    tls = config["client_encryption_options"]
    assert (tls["enabled"], tls["optional"], tls["require_client_auth"]) == (True, False, True)
    assert tls["ssl_context_factory"]["class_name"].endswith(".PEMBasedSslContextFactory")
    assert tls["keystore"] == str(node.pki.server_pem)
    assert tls["truststore"] == str(node.pki.ca)
    # Everything else is the plain test node's.
    assert config["native_transport_port"] == PORTS["native"]
    assert config["commitlog_sync"] == "batch"


def test_client_certificates_can_be_optional(tmp_path: Path) -> None:
    node = SecureCassandra(tmp_path / "state", tmp_path / "cache", require_client_auth=False)
    config = yaml.safe_load(node._yaml(PORTS))
    assert config["client_encryption_options"]["require_client_auth"] is False


def test_clients_get_the_node_and_their_files_under_names_of_their_own(tmp_path: Path) -> None:
    node = SecureCassandra(tmp_path / "state", tmp_path / "cache")
    env = node.env(PORTS)
    assert env["CLOCKWORK_CASSANDRA_SECURE"] == f"127.0.0.1:{PORTS['native']}"
    assert env["CLOCKWORK_CASSANDRA_SECURE_TLS_CA"] == str(node.pki.ca)
    assert env["CLOCKWORK_CASSANDRA_SECURE_USER"] == "clockwork"
    assert "CLOCKWORK_CASSANDRA" not in env
