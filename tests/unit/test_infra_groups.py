"""The harness's three-member clusters (e2e/infra/group.py): each member's generated
configuration names the same cluster, its own address and its peers, and the CLI
starts the clusters only when named. The clusters themselves run under
tests/contract (cassandra-rf3) and tests/nemesis/test_replicated_stores.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import yaml

from e2e.infra import cql
from e2e.infra.__main__ import Managed, _select
from e2e.infra.cassandra import Cassandra
from e2e.infra.cassandra_cluster import ADDRESSES, CassandraCluster, token
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
    expected = ",".join(f"member{i + 1}=http://127.0.0.1:{port}" for i, port in enumerate(peers))
    for member in group.members:
        flags = member._membership("unused")
        assert f"--initial-cluster={expected}" in flags
        assert f"--name={member.name}" in flags
    group.assign_ports()  # recorded ports are kept (a restart rejoins on them)
    again = [json.loads((m.dir / "instance.json").read_text())["ports"] for m in group.members]
    assert [p["peer"] for p in again] == peers


def _names(chosen: list[Managed]) -> list[str]:
    return [server.name for server in chosen]


def test_up_starts_the_clusters_only_when_named_and_down_stops_them(tmp_path: Path) -> None:
    names = _names
    assert "cassandra-cluster" not in names(_select([], tmp_path, tmp_path))
    assert names(_select(["cassandra-cluster"], tmp_path, tmp_path)) == ["cassandra-cluster"]
    everything = names(_select([], tmp_path, tmp_path, groups_by_default=True))
    assert {"cassandra", "etcd", "cassandra-cluster", "etcd-cluster"} <= set(everything)


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
