"""The harness's secured etcd (e2e/infra/etcd_secure.py): its command line serves
clients only over https with client certificates, and the CLI starts it only when
named. The member itself runs under tests/integration/test_etcd_security.py."""

from __future__ import annotations

from pathlib import Path

from e2e.infra.__main__ import _select
from e2e.infra.etcd_secure import CLIENT_LEAVES, SecureEtcd


def test_clients_are_served_only_over_https_with_client_certificates(tmp_path: Path) -> None:
    server = SecureEtcd(tmp_path / "state", tmp_path / "cache")
    server.conf_dir.mkdir(parents=True)
    server.data_dir.mkdir(parents=True)
    argv = server.configure({"client": 23790, "peer": 23800}).argv
    flags = [arg for arg in argv if arg.startswith("--")]
    assert "--listen-client-urls=https://127.0.0.1:23790" in flags
    assert "--advertise-client-urls=https://127.0.0.1:23790" in flags
    assert not [f for f in flags if "client-urls" in f and "http://" in f]
    assert "--client-cert-auth" in flags
    pki = server.pki_dir
    assert f"--trusted-ca-file={pki / 'ca.crt'}" in flags
    assert f"--cert-file={pki / 'server.crt'}" in flags
    for leaf in ("server", *CLIENT_LEAVES):
        assert (pki / f"{leaf}.crt").is_file() and (pki / f"{leaf}.key").is_file()
    # A restart keeps its certificates (clients hold the CA).
    before = (pki / "ca.crt").read_bytes()
    server.configure({"client": 23790, "peer": 23800})
    assert (pki / "ca.crt").read_bytes() == before


def test_up_starts_it_only_when_named_and_down_stops_it(tmp_path: Path) -> None:
    def names(*args: str, down: bool = False) -> list[str]:
        chosen = _select(list(args), tmp_path, tmp_path, groups_by_default=down)
        return [server.name for server in chosen]

    assert "etcd-secure" not in names()
    assert names("etcd-secure") == ["etcd-secure"]
    assert "etcd-secure" in names(down=True)
