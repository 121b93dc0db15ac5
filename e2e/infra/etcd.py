"""A real single-member etcd 3.5 on 127.0.0.1, built from source via the Go module proxy.

No release tarball is reachable here, but the Go module proxy serves etcd's
source.  ``go install go.etcd.io/etcd/server/v3@v3.5.x`` refuses to build
(etcd's ``go.mod`` has ``replace`` directives), so a throwaway wrapper module
requires the server and builds its main package instead.  Binaries and all of
Go's caches live under the harness cache dir, so a second run does not call Go
and a developer's own ``GOPATH``/``GOFLAGS`` cannot change the build.

One etcd serves both the scheduler's coordinator (leases, transactions,
watches) and, later, a kube-apiserver: Kubernetes 1.31+ needs etcd >= 3.5.11.

The member runs with ``--unsafe-no-fsync``: a kill -9 of the *process* loses
nothing (the writes are in the page cache), only a machine crash would.  Data
survives ``stop()``/``kill()``/``restart()``, and so do leases: etcd persists
them and, on restart, gives each one a fresh full TTL plus the election
timeout (a new leader cannot know how long it was down).  So a lease outlives a
restart within its TTL just as on a real cluster, and downtime never counts
against a lease: measured, a TTL-3 lease survived 5 s of downtime.

Usage from a pytest fixture::

    from e2e.infra import etcd

    member = etcd.start(tmp_path)           # or start() for <repo>/.infra
    client = aetcd.Client(host=member.host, port=member.port)
    ...
    member.kill(); member.restart()         # same port, same data
    member.destroy()
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .process import file_lock, tail
from .server import InfraError, LaunchSpec, ProbeError, Running, Status, VersionedServer

log = logging.getLogger(__name__)

ETCD_VERSION = "3.5.35"
"""Pinned: the newest 3.5.x on the Go module proxy when this was written; its
``go.mod`` says ``go 1.26.0``, so it builds with the installed Go 1.26 (3.5.11+
is what Kubernetes 1.31+ requires)."""

ENV_VAR = "CLOCKWORK_ETCD"
MEMBER_NAME = "clockwork-test"
WRAPPER_MODULE = "local/etcdbin"
MARKER = "built.json"
GO_TIMEOUT_S = 30 * 60

# Main packages to build: binary name -> module path (the package is the module root).
_BINARIES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    # Not needed by the harness; shares nearly all packages with the server, so
    # it costs a few seconds and saves debugging sessions a separate build.
    "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
}


class Etcd(VersionedServer):
    """Single-member etcd; ports: ``client`` (gRPC + HTTP, published) and ``peer`` (raft)."""

    name = "etcd"
    env_var = ENV_VAR
    port_names = ("client", "peer")
    ready_timeout = 60.0
    stop_timeout = 15.0
    # ``<cache>/etcd-<version>``: ``src/`` (wrapper module), ``bin/``, build.log, marker.
    dist_prefix = "etcd"
    default_version = ETCD_VERSION

    def __init__(
        self,
        state_dir: Path | None = None,
        cache_dir: Path | None = None,
        *,
        version: str | None = None,
        log_level: str = "info",
    ) -> None:
        """``log_level`` is etcd's ``--log-level`` (``debug``/``info``/``warn``/``error``)."""
        super().__init__(state_dir, cache_dir, version=version)
        self.log_level = log_level

    # --- cache layout -----------------------------------------------------------

    @property
    def etcd_bin(self) -> Path:
        return self.bin_dir / "etcd"

    @property
    def etcdctl_bin(self) -> Path:
        """Handy for debugging: ``etcdctl --endpoints 127.0.0.1:PORT get --prefix /``."""
        return self.bin_dir / "etcdctl"

    @property
    def go_dir(self) -> Path:
        """``<cache>/go``: GOPATH, module cache and build cache, shared by every Go build."""
        return self.cache_dir / "go"

    # --- Server -------------------------------------------------------------------

    def fetch(self) -> None:
        """Build etcd (and etcdctl) once; without calling Go when the marker says it is done."""
        if self._is_built():
            return
        with file_lock(self.dist_dir / ".lock"):
            if self._is_built():  # another process finished meanwhile
                return
            self._build()

    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        """The ``etcd`` command line; there is no config file to write."""
        self.data_dir.chmod(0o700)  # etcd logs a warning for a data dir others can read
        client = f"http://{self.host}:{ports['client']}"
        peer = f"http://{self.host}:{ports['peer']}"
        argv = (
            str(self.etcd_bin),
            f"--data-dir={self.data_dir}",
            # Every local address: pods on the real node reach it at the pod
            # network's gateway.
            f"--listen-client-urls=http://0.0.0.0:{ports['client']}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            *self._membership(peer),
            # Test data only: a process crash loses nothing, a machine crash might.
            "--unsafe-no-fsync",
            # Keep an hour of history (watch resumption after a restart needs old
            # revisions) without letting a long benchmark grow the db unbounded.
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1h",
            "--logger=zap",
            "--log-outputs=stderr",  # the harness appends it to etcd.log
            f"--log-level={self.log_level}",
        )
        return LaunchSpec(argv=argv, cwd=self.dir, env=_server_env())

    def _membership(self, peer_url: str) -> list[str]:
        """The member's name, its cluster and its raft timing flags."""
        return [
            f"--name={MEMBER_NAME}",
            # Only read when the data dir is empty; a restart rejoins from its WAL.
            f"--initial-cluster={MEMBER_NAME}={peer_url}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={MEMBER_NAME}",
            # A restarted single member waits one randomized election timeout
            # (1-2 s by default) before electing itself; fault tests restart a lot.
            # A lone member has no follower that could time out, so nothing is lost.
            "--heartbeat-interval=100",
            "--election-timeout=500",
        ]

    def probe(self, port: int, timeout: float) -> str:
        """Ready when ``/health`` says true and a linearizable KV range answers.

        ``/health`` (3.5) fails without a leader, with an active alarm (e.g.
        NOSPACE) or if a quorum read times out.  The range request then goes
        through the gRPC gateway into the very KV service that clients use,
        read-only so that probing never bumps the revision tests observe.
        """
        base = f"http://{self.host}:{port}"
        health = http_json(f"{base}/health", None, timeout)
        if health.get("health") != "true":
            raise ProbeError(f"/health says {health}")
        key = base64.b64encode(b"/clockwork-infra/probe").decode()
        ranged = http_json(f"{base}/v3/kv/range", {"key": key}, timeout)
        revision = ranged.get("header", {}).get("revision")
        if revision is None:
            raise ProbeError(f"/v3/kv/range answered without a header: {ranged}")
        version = http_json(f"{base}/version", None, timeout).get("etcdserver", "?")
        return f"{version}, revision {revision}"

    # --- building -------------------------------------------------------------------

    def _is_built(self) -> bool:
        """Whether the marker of a completed build of this version is there with its binaries."""
        try:
            marker = json.loads((self.dist_dir / MARKER).read_text())
        except (OSError, ValueError):
            return False
        if marker.get("version") != self.version:
            return False
        return all((self.bin_dir / name).is_file() for name in _BINARIES)

    def _build(self) -> None:
        """Wrapper module, ``go get``, ``go build`` into ``bin.tmp``, swap in, write the marker.

        The staging directory makes an interrupted build look unbuilt rather
        than half-built; the module source is redone from scratch each time,
        which costs nothing once the module cache has it.
        """
        go = _go()
        src, staging = self.dist_dir / "src", self.dist_dir / "bin.tmp"
        build_log = self.dist_dir / "build.log"
        for directory in (src, staging):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        env = _go_env(self.go_dir)
        modules = [f"{module}@v{self.version}" for module in _BINARIES.values()]
        log.info("building etcd %s with %s (log: %s)", self.version, go, build_log)
        started = time.monotonic()
        with build_log.open("w") as out:
            _run([go, "version"], src, env, out)
            _run([go, "mod", "init", WRAPPER_MODULE], src, env, out)
            _run([go, "get", *modules], src, env, out)
            for name, package in _BINARIES.items():
                _run([go, "build", "-trimpath", "-o", str(staging / name), package], src, env, out)
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        staging.replace(self.bin_dir)
        took = time.monotonic() - started
        marker = {"version": self.version, "binaries": sorted(_BINARIES), "build_s": round(took)}
        (self.dist_dir / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        log.info("built etcd %s in %.1fs into %s", self.version, took, self.bin_dir)


# --- Go ---------------------------------------------------------------------------


def _go() -> str:
    """``go`` on PATH, else the usual ``/usr/local/go/bin/go``."""
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        raise InfraError("etcd: `go` not found; install Go >= 1.26 (e.g. into /usr/local/go)")
    return go


def _go_env(go_dir: Path) -> dict[str, str]:
    """The environment for ``go``: caches under ``go_dir``, nothing from the user's Go setup.

    The proxy settings (``GOPROXY``, ``GOSUMDB``...) are inherited: they
    describe the network.  ``GOTOOLCHAIN=local`` makes a too-new ``go``
    directive fail loudly instead of downloading another toolchain, and
    ``-modcacherw`` keeps the module cache deletable with a plain ``rm -rf``.
    """
    env = dict(os.environ)
    env.update(
        GOPATH=str(go_dir / "path"),
        GOMODCACHE=str(go_dir / "mod"),
        GOCACHE=str(go_dir / "build"),
        GOFLAGS="-modcacherw -buildvcs=false",
        GOTOOLCHAIN="local",
        GOWORK="off",
        GO111MODULE="on",
        CGO_ENABLED="0",
    )
    return env


def _run(argv: Sequence[str], cwd: Path, env: Mapping[str, str], out: TextIO) -> None:
    """Run one Go command with its output appended to the build log; raise on failure."""
    out.write(f"$ {' '.join(argv)}\n")
    out.flush()
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=GO_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"etcd: `{' '.join(argv[1:3])}` timed out after {GO_TIMEOUT_S}s") from exc
    out.write(f"# exit {done.returncode} after {time.monotonic() - started:.1f}s\n")
    out.flush()
    if done.returncode != 0:
        raise InfraError(
            f"etcd: `{' '.join(argv)}` failed (exit {done.returncode}); "
            f"last lines of {out.name}:\n{tail(Path(out.name), 40)}"
        )


def _server_env() -> dict[str, str]:
    """The caller's environment without ``ETCD_*``: etcd reads every ``ETCD_<FLAG>``
    variable as a flag, so an exported one would silently reconfigure the member."""
    return {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}


# --- HTTP ---------------------------------------------------------------------------


def http_json(
    url: str,
    body: Mapping[str, str] | None,
    timeout: float,
    context: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """GET (or POST ``body`` as JSON to) ``url`` (https with ``context``) and decode a
    JSON object; ProbeError if not."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:  # e.g. 503 from /health without a leader
        raise ProbeError(f"{url}: HTTP {exc.code} {exc.read()[:200]!r}") from exc
    except http.client.HTTPException as exc:  # not an OSError, unlike refused/reset/timeout
        raise ProbeError(f"{url}: {type(exc).__name__}: {exc}") from exc
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise ProbeError(f"{url}: not JSON: {raw[:200]!r}") from exc
    if not isinstance(decoded, dict):
        raise ProbeError(f"{url}: not a JSON object: {raw[:200]!r}")
    return decoded


# --- module-level API (what fixtures and the CLI call) -------------------------


def start(
    state_dir: Path | None = None,
    cache_dir: Path | None = None,
    *,
    timeout: float | None = None,
) -> Running:
    """Build if needed, start (or reuse) the member in ``<state_dir>/etcd``, wait for ready."""
    return Etcd(state_dir, cache_dir).start(timeout)


def attach(state_dir: Path | None = None) -> Running | None:
    """A handle on an already running member (e.g. started by ``python -m e2e.infra up``)."""
    return Etcd(state_dir).attach()


def stop(state_dir: Path | None = None, *, keep_data: bool = False) -> None:
    """Stop the member; delete its state unless ``keep_data``."""
    Etcd(state_dir).down(keep_data=keep_data)


def status(state_dir: Path | None = None) -> Status:
    """Whether the member runs and answers ``/health`` and a KV read."""
    return Etcd(state_dir).status()


def fetch(cache_dir: Path | None = None) -> Path:
    """Build the pinned etcd into the cache; returns the ``etcd`` binary."""
    server = Etcd(cache_dir=cache_dir)
    server.fetch()
    return server.etcd_bin
