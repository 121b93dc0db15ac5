"""Test certificates made with openssl: one CA, and leaf certificates it signs.

Each leaf `NAME` gets `NAME.key` and `NAME.crt` (CN=NAME, valid for 127.0.0.0/8's
usual addresses and localhost), beside `ca.crt` and `ca.key`. Used by the TLS tests
and by the harness's secured servers."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

# Addresses the harness's servers listen on (127.0.0.1, and 127.0.0.2-4 for the
# Cassandra cluster's nodes).
LOOPBACK_SAN = "IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3,IP:127.0.0.4,DNS:localhost"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(
    d: Path, ca_name: str, leaves: Sequence[str] = ("server", "client"), days: int = 2
) -> Path:
    """A CA named `ca_name` in `d`, and one certificate per name in `leaves`."""
    d.mkdir(parents=True, exist_ok=True)
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        str(days),
        "-subj",
        f"/CN={ca_name}",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=d,
    )
    (d / "san.ext").write_text(f"subjectAltName={LOOPBACK_SAN}\n")
    for name in leaves:
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            str(days),
            "-extfile",
            "san.ext",
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    return d
