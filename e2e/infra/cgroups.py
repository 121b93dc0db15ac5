"""A cgroup v2 of its own for a server process, so that the kernel can tell its packets
from those of every other process on loopback (nftables' ``socket cgroupv2``; see
e2e/loopback_cut.py). A group's members (e2e/infra/group.py) run each in one, named
after its state directory; a machine without a writable cgroup v2 hierarchy runs them
without (and the nemeses that need it skip).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

NFT_BASE = Path("/sys/fs/cgroup")
"""nftables resolves a ``socket cgroupv2`` path relative to this directory."""


def hierarchy() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (from /proc/mounts), if under NFT_BASE."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            mount = Path(fields[1])
            if mount == NFT_BASE or NFT_BASE in mount.parents:
                return mount
    return None


def cgroup_path(server_dir: Path) -> Path | None:
    """The cgroup of the server whose state is in ``server_dir`` (not created)."""
    root = hierarchy()
    if root is None:
        return None
    digest = hashlib.sha256(str(server_dir).encode()).hexdigest()[:10]
    return root / f"clockwork-{server_dir.name}-{digest}"


def own_cgroup(server_dir: Path) -> Path | None:
    """Create (if needed) the cgroup of the server whose state is in ``server_dir``."""
    path = cgroup_path(server_dir)
    if path is None:
        return None
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        log.info("no cgroup for %s (%s): it runs in its parent's", server_dir, exc)
        return None
    return path


def launched_in(cgroup: Path, argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` run by a shell that first moves itself into ``cgroup`` (then execs it)."""
    return ("sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *argv)


def remove(server_dir: Path) -> None:
    """Delete the server's cgroup once empty (errors ignored: it may not exist)."""
    path = cgroup_path(server_dir)
    if path is not None:
        with contextlib.suppress(OSError):
            path.rmdir()


def nft_selector(cgroup: Path) -> str:
    """The nftables match for sockets of processes in ``cgroup``."""
    root = hierarchy()
    assert root is not None
    level = len(cgroup.relative_to(root).parts)
    return f'socket cgroupv2 level {level} "{cgroup.relative_to(NFT_BASE)}"'
