"""Container images without a registry: the Dockerfile's base, the pause image, and
Clockwork's own image built from the unmodified ``Dockerfile``.

Nothing here can pull from a registry, so:

* the Dockerfile's base (``python:3.11-slim-bookworm``) is stood in for by a Debian
  bookworm ``minbase`` made with ``debootstrap`` from Debian's packages (Python 3.11,
  venv, CA certificates), imported into the local image store under that very name,
  so ``buildah bud --pull=never`` builds the Dockerfile as it is. The host's CA bundle
  and a ``pip.conf`` naming it are copied in: package traffic from this machine goes
  through a proxy whose certificate only that bundle holds;
* the pod sandbox ("pause") image is a static Go program that sleeps until a signal,
  in an image of its own (``scratch`` plus that one file);
* images reach the node's containerd as OCI archives (``buildah push
  oci-archive:``, then ``ctr images import``), and the chart runs them with
  ``image.pullPolicy=Never``.

The rootfs tarball and the pause archive are cached under ``<cache>/images/``; the
images in buildah's store are re-made from them when missing.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .etcd import _go, _go_env
from .paths import REPO_ROOT
from .process import file_lock
from .server import InfraError

log = logging.getLogger(__name__)

BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
PAUSE_IMAGE = "localhost/clockwork-pause:1"
CLOCKWORK_REPOSITORY = "localhost/clockwork"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_TIMEOUT_S = 1800
DEBIAN_PACKAGES = ("buildah", "debootstrap")

PAUSE_SOURCE = """\
// The pod sandbox: holds the pod's namespaces and waits for a signal to exit.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
"""

# What a build context holds: exactly what the Dockerfile copies.
_CONTEXT = (
    "Dockerfile",
    "pyproject.toml",
    "README.md",
    "clockwork_svc",
    "operator/clockwork_operator",
)


def images_dir(cache_dir: Path) -> Path:
    return cache_dir / "images"


def _run(argv: Sequence[str], *, what: str, cwd: Path | None = None,
         env: Mapping[str, str] | None = None) -> str:  # fmt: skip
    done = subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        err = (done.stderr or b"").decode(errors="replace")[-3000:]
        raise InfraError(f"{what}: `{' '.join(argv[:4])} ...` failed ({done.returncode}):\n{err}")
    return done.stdout.decode(errors="replace")


def require_tools() -> None:
    """buildah and debootstrap, from Debian's packages."""
    missing = [tool for tool in DEBIAN_PACKAGES if shutil.which(tool) is None]
    if missing:
        raise InfraError(
            f"images: {', '.join(missing)} not installed (apt-get install {' '.join(missing)})"
        )


def has_image(name: str) -> bool:
    done = subprocess.run(["buildah", "inspect", "--type", "image", name], capture_output=True)
    return done.returncode == 0


# --- the Dockerfile's base ---------------------------------------------------------


def base_rootfs(cache_dir: Path) -> Path:
    """The debootstrapped rootfs as a tarball (made once, ~1 min)."""
    target = images_dir(cache_dir) / "base-bookworm.tar"
    marker = target.with_suffix(".json")
    wanted = {"packages": list(BASE_PACKAGES), "mirror": DEBIAN_MIRROR}
    if target.is_file() and _read_json(marker) == wanted:
        return target
    with file_lock(images_dir(cache_dir) / ".base.lock"):
        if target.is_file() and _read_json(marker) == wanted:
            return target
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=images_dir(cache_dir)) as tmp:
            rootfs = Path(tmp) / "rootfs"
            log.info("debootstrap of the base image (bookworm minbase) into %s", rootfs)
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                  "bookworm", str(rootfs), DEBIAN_MIRROR], what="debootstrap")  # fmt: skip
            for heavy in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc",
                          "usr/share/man", "usr/share/locale"):  # fmt: skip
                shutil.rmtree(rootfs / heavy, ignore_errors=True)
            shutil.copyfile(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
            (rootfs / "etc/pip.conf").write_text(f"[global]\ncert = {HOST_CA_BUNDLE}\n")
            partial = target.with_suffix(".tmp")
            _run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], what="tar rootfs")
            partial.replace(target)
        marker.write_text(json.dumps(wanted) + "\n")
        log.info("base rootfs ready in %.0fs: %s", time.monotonic() - started, target)
    return target


def ensure_base_image(cache_dir: Path) -> None:
    """``python:3.11-slim-bookworm`` in buildah's store, from the cached rootfs."""
    images_dir(cache_dir).mkdir(parents=True, exist_ok=True)
    if has_image(BASE_IMAGE):
        return
    tarball = base_rootfs(cache_dir)
    _run(["podman", "import", str(tarball), BASE_IMAGE], what="podman import")


# --- the pause image ----------------------------------------------------------------


def pause_archive(cache_dir: Path) -> Path:
    """An OCI archive of the pause image (built once from ``PAUSE_SOURCE``)."""
    target = images_dir(cache_dir) / "pause.oci.tar"
    if target.is_file():
        return target
    images_dir(cache_dir).mkdir(parents=True, exist_ok=True)
    with file_lock(images_dir(cache_dir) / ".pause.lock"):
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=images_dir(cache_dir)) as tmp:
            src = Path(tmp)
            (src / "main.go").write_text(PAUSE_SOURCE)
            env = _go_env(cache_dir / "go")
            go = _go()
            _run([go, "mod", "init", "local/pause"], what="pause: go mod init", cwd=src, env=env)
            _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", "pause", "."],
                 what="pause: go build", cwd=src, env=env)  # fmt: skip
            container = _run(["buildah", "from", "scratch"], what="buildah from").strip()
            try:
                _run(["buildah", "copy", container, str(src / "pause"), "/pause"], what="copy")
                _run(["buildah", "config", "--entrypoint", '["/pause"]', container], what="cfg")
                _run(["buildah", "commit", "-q", container, PAUSE_IMAGE], what="commit")
            finally:
                subprocess.run(["buildah", "rm", container], capture_output=True)
            export(PAUSE_IMAGE, target)
    return target


# --- Clockwork's image ------------------------------------------------------------------


def build_clockwork(tag: str, cache_dir: Path, *, version: str | None = None) -> str:
    """Build the repository's Dockerfile, unmodified, as ``localhost/clockwork:<tag>``.

    ``version`` replaces the package version in ``pyproject.toml`` of the build
    context (an upgrade's "new release"); the repository itself is not touched.
    Returns the image name.
    """
    require_tools()
    ensure_base_image(cache_dir)
    name = f"{CLOCKWORK_REPOSITORY}:{tag}"
    with tempfile.TemporaryDirectory(prefix="clockwork-build-") as tmp:
        context = Path(tmp)
        for item in _CONTEXT:
            source, dest = REPO_ROOT / item, context / item
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(source, dest)
        if version is not None:
            pyproject = context / "pyproject.toml"
            text = pyproject.read_text()
            current = 'version = "' + _package_version(text) + '"'
            pyproject.write_text(text.replace(current, f'version = "{version}"', 1))
        _run(["buildah", "bud", "--pull=never", "--network", "host", "--layers",
              "-t", name, str(context)], what=f"buildah bud {name}")  # fmt: skip
    return name


def _package_version(pyproject: str) -> str:
    for line in pyproject.splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise InfraError("images: no version line in pyproject.toml")


def export(image: str, archive: Path) -> Path:
    """Write ``image`` as an OCI archive (replaced atomically)."""
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _run(["buildah", "push", "-q", image, f"oci-archive:{partial}:{image}"], what="buildah push")
    partial.replace(archive)
    return archive


def inspect(image: str) -> dict[str, object]:
    """The image's config and size, as buildah reports them."""
    raw = json.loads(_run(["buildah", "inspect", "--type", "image", image], what="inspect"))
    config = raw.get("OCIv1", {}).get("config", {})
    size = subprocess.run(
        ["podman", "image", "inspect", image, "--format", "{{.Size}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {"user": config.get("User", ""), "size": int(size) if size.isdigit() else -1}


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run(image: str, *args: str, entrypoint: str | None = None) -> str:
    """Run ``image`` once with podman (no network) and return what it printed."""
    argv = ["podman", "run", "--rm", "--network", "none",
            # Hard limits cannot be raised on this kind of host; podman's defaults try.
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]  # fmt: skip
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return _run([*argv, image, *args], what=f"podman run {image}")
