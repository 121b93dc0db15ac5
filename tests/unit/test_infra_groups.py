"""The harness's three-member clusters (e2e/infra/group.py): each member's generated
configuration names the same cluster, its own address and its peers, every member is
secured (TLS to clients and peers, logins), and the CLI starts the clusters only when
named. The clusters themselves run under
tests/contract (cassandra-rf3) and tests/nemesis/test_replicated_stores.py."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import yaml

from e2e.infra import cql
from e2e.infra.__main__ import Managed, _parser, _select
from e2e.infra.cassandra import Cassandra
from e2e.infra.cassandra_cluster import ADDRESSES, ENV_VAR, CassandraCluster, token
from e2e.infra.etcd_cluster import ENV_VAR as ETCD_ENV_VAR
from e2e.infra.etcd_cluster import EtcdCluster

PORTS = {"native": 29042, "storage": 27000}


def test_tokens_cut_the_murmur3_range_evenly() -> None:
    tokens = [token(i) for i in range(3)]
    assert tokens[0] == -(2**63)
    assert tokens == sorted(tokens) and tokens[-1] < 2**63 - 1
    gaps = {b - a for a, b in zip(tokens, [*tokens[1:], 2**63], strict=True)}
    assert max(gaps) - min(gaps) <= 3


def test_each_node_has_its_address_its_token_and_the_first_as_seed(tmp_path: Path) -> None:
    group = CassandraCluster(tmp_path / "state", tmp_path / "cache")
    configs = [yaml.safe_load(node._yaml(PORTS)) for node in group.members]
    assert [c["listen_address"] for c in configs] == list(ADDRESSES)
    assert [c["rpc_address"] for c in configs] == list(ADDRESSES)
    assert [c["initial_token"] for c in configs] == [token(i) for i in range(3)]
    for config in configs:
        assert config["cluster_name"] == configs[0]["cluster_name"]
        seeds = config["seed_provider"][0]["parameters"][0]["seeds"]
        assert seeds == f"{ADDRESSES[0]}:{PORTS['storage']}"
        assert config["auto_bootstrap"] is False
        assert config["hinted_handoff_enabled"] is True
        assert config["commitlog_sync"] == "periodic"  # production's
    assert len({node.dir for node in group.members}) == 3


def test_the_single_node_stays_alone_and_synced(tmp_path: Path) -> None:
    config = yaml.safe_load(Cassandra(tmp_path / "state", tmp_path / "cache")._yaml(PORTS))
    assert config["listen_address"] == "127.0.0.1"
    assert config["hinted_handoff_enabled"] is False
    assert config["commitlog_sync"] == "batch"
    assert "initial_token" not in config


def test_etcd_members_list_every_peer_with_its_recorded_port(tmp_path: Path) -> None:
    group = EtcdCluster(tmp_path / "state", tmp_path / "cache")
    group.assign_ports()
    peers = [
        json.loads((m.dir / "instance.json").read_text())["ports"]["peer"] for m in group.members
    ]
    assert len(set(peers)) == 3
    expected = ",".join(f"member{i + 1}=https://127.0.0.1:{port}" for i, port in enumerate(peers))
    for member in group.members:
        flags = member._membership("unused")
        assert f"--initial-cluster={expected}" in flags
        assert f"--name={member.name}" in flags
    group.assign_ports()  # recorded ports are kept (a restart rejoins on them)
    again = [json.loads((m.dir / "instance.json").read_text())["ports"] for m in group.members]
    assert [p["peer"] for p in again] == peers


def test_the_cassandra_nodes_are_secured_with_one_certificate_authority(tmp_path: Path) -> None:
    group = CassandraCluster(tmp_path / "state", tmp_path / "cache")
    configs = [yaml.safe_load(node._yaml(PORTS)) for node in group.members]
    pki = tmp_path / "state" / "cassandra-cluster" / "pki"
    for config in configs:
        assert config["authenticator"] == "PasswordAuthenticator"
        assert config["authorizer"] == "CassandraAuthorizer"
        encryption = config["client_encryption_options"]
        assert encryption["enabled"] is True and encryption["optional"] is False
        assert encryption["require_client_auth"] is True
        assert encryption["truststore"] == str(pki / "ca.crt")
    env = group.client_env()
    assert env[f"{ENV_VAR}_TLS_CA"] == str(pki / "ca.crt")
    assert {f"{ENV_VAR}_USER", f"{ENV_VAR}_PASSWORD", f"{ENV_VAR}_TLS_CERT"} <= set(env)


def test_etcd_members_speak_tls_to_clients_and_peers(tmp_path: Path) -> None:
    group = EtcdCluster(tmp_path / "state", tmp_path / "cache")
    group.assign_ports()
    group.members[0].make_pki()
    pki = tmp_path / "state" / "etcd-cluster" / "pki"
    for member in group.members:
        member.conf_dir.mkdir(parents=True)
        member.data_dir.mkdir(parents=True)
        ports = json.loads((member.dir / "instance.json").read_text())["ports"]
        flags = [arg for arg in member.configure(ports).argv if arg.startswith("--")]
        assert f"--listen-client-urls=https://127.0.0.1:{ports['client']}" in flags
        assert f"--listen-peer-urls=https://127.0.0.1:{ports['peer']}" in flags
        assert not [f for f in flags if "-urls=" in f and "http://" in f]
        assert {"--client-cert-auth", "--peer-client-cert-auth"} <= set(flags)
        assert f"--peer-trusted-ca-file={pki / 'ca.crt'}" in flags
        assert f"--trusted-ca-file={pki / 'ca.crt'}" in flags
    env = group.client_env()
    assert env[f"{ETCD_ENV_VAR}_TLS_CERT"] == str(pki / "clockwork.crt")


def _names(chosen: list[Managed]) -> list[str]:
    return [server.name for server in chosen]


def test_up_starts_the_clusters_only_when_named_and_down_stops_them(tmp_path: Path) -> None:
    names = _names
    assert "cassandra-cluster" not in names(_select([], tmp_path, tmp_path))
    assert names(_select(["cassandra-cluster"], tmp_path, tmp_path)) == ["cassandra-cluster"]
    everything = names(_select([], tmp_path, tmp_path, groups_by_default=True))
    assert {"cassandra", "etcd", "cassandra-cluster", "etcd-cluster"} <= set(everything)


def test_the_single_node_flushes_schema_changes_unless_told() -> None:
    tmp = Path("/nonexistent")
    [default] = _select(["cassandra"], tmp, tmp)
    assert isinstance(default, Cassandra) and default.unsafe_system is False
    args = _parser().parse_args(["up", "cassandra", "--cassandra-unsafe-system"])
    [fast] = _select(["cassandra"], tmp, tmp, cassandra_unsafe_system=args.cassandra_unsafe_system)
    assert isinstance(fast, Cassandra) and fast.unsafe_system is True
    assert _parser().parse_args(["down"]).cassandra_unsafe_system is False


def test_nodes_run_paxos_v2_unless_told() -> None:
    tmp = Path("/nonexistent")
    [default] = _select(["cassandra"], tmp, tmp)
    assert isinstance(default, Cassandra)
    conf = yaml.safe_load(default._yaml(PORTS))
    assert conf["paxos_variant"] == "v2"
    args = _parser().parse_args(["up", "cassandra", "--cassandra-paxos-variant", "v1"])
    [legacy] = _select(
        ["cassandra"], tmp, tmp, cassandra_paxos_variant=args.cassandra_paxos_variant
    )
    assert isinstance(legacy, Cassandra)
    assert yaml.safe_load(legacy._yaml(PORTS))["paxos_variant"] == "v1"
    # The clusters' nodes write the same key.
    node = CassandraCluster(tmp, tmp).members[0]
    assert yaml.safe_load(node._yaml(PORTS))["paxos_variant"] == "v2"


def test_a_reused_node_launched_with_other_options_is_named(tmp_path: Path) -> None:
    """`up` reuses a running node as it is; it says how that node's launch differs."""
    launched = Cassandra(tmp_path, tmp_path, commitlog_sync="periodic", paxos_variant="v1")
    launched.conf_dir.mkdir(parents=True)
    (launched.conf_dir / "cassandra.yaml").write_text(launched._yaml(PORTS))
    this_process = os.getpid()  # its command line has no -Dcassandra.unsafesystem
    assert launched.launched_otherwise(this_process) is None
    asked = Cassandra(tmp_path, tmp_path, unsafe_system=True)
    differs = asked.launched_otherwise(this_process)
    assert differs is not None
    assert "unsafe_system False (asked: True)" in differs
    assert "commitlog_sync periodic (asked: batch)" in differs
    assert "paxos_variant v1 (asked: v2)" in differs


def test_rows_of_a_result_are_all_decoded() -> None:
    def string(text: str) -> bytes:
        return struct.pack(">H", len(text)) + text.encode()

    def cell(value: bytes) -> bytes:
        return struct.pack(">i", len(value)) + value

    body = (
        struct.pack(">iii", cql.RESULT_ROWS, cql.ROWS_GLOBAL_TABLES_SPEC, 1)
        + string("system")
        + string("peers_v2")
        + string("peer")
        + struct.pack(">H", 0x0010)  # inet
        + struct.pack(">i", 2)
        + cell(b"\x7f\x00\x00\x03")
        + cell(b"\x7f\x00\x00\x04")
    )
    assert cql._rows(body) == [[b"\x7f\x00\x00\x03"], [b"\x7f\x00\x00\x04"]]
