"""The lifecycle every managed server shares: state layout, start, readiness, stop.

A server type (Cassandra today; etcd, Kafka, kube-apiserver later) is one
subclass of :class:`Server` that says only what differs between them:

* ``fetch()``: put its binaries in the cache (idempotent, fast when cached);
* ``configure(ports)``: write its config files and say how to launch it;
* ``probe(port, timeout)``: prove it is ready with a real protocol request.

Everything else — the per-server directory, free ports that survive restarts,
pid files, locking against concurrent runs, the readiness loop with a log tail
on failure, graceful-then-forced stop, ``env`` files — lives here once.

Layout of ``<state>/<name>/``: ``data/``, ``conf/``, ``<name>.log``,
``<name>.pid``, ``instance.json`` (the chosen ports) and ``env``; ``<state>/env``
concatenates the ``env`` files of all running servers.
"""

from __future__ import annotations

import abc
import json
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar

from .cgroups import launched_in
from .paths import default_cache_dir, default_state_dir
from .process import (
    LOOPBACK,
    SpawnError,
    file_lock,
    is_alive,
    kill_group,
    pick_free_port,
    port_is_free,
    read_pid_file,
    spawn_daemon,
    tail,
    terminate_group,
    write_pid_file,
)

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 50


class InfraError(RuntimeError):
    """A server could not be fetched, started or stopped; the message is for humans."""


class ProbeError(Exception):
    """A readiness probe reached the server, which is not ready (yet)."""


@dataclass(frozen=True)
class LaunchSpec:
    """How to run a server process; ``cwd`` is usually the server's state dir."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]


@dataclass(frozen=True)
class Status:
    """What ``status`` reports for one server."""

    name: str
    running: bool
    ready: bool
    pid: int | None
    address: str | None
    detail: str

    def line(self) -> str:
        """One human-readable line, e.g. ``cassandra: ready pid=123 127.0.0.1:9042 (5.0.9)``."""
        if not self.running:
            return f"{self.name}: {self.detail}"
        state = "ready" if self.ready else "NOT READY"
        return f"{self.name}: {state} pid={self.pid} {self.address} ({self.detail})"


class Server(abc.ABC):
    """One server type bound to a state dir (runtime files) and a cache dir (binaries)."""

    name: str
    """The state directory's name; a member of a group (``group.py``) sets its own."""
    env_var: ClassVar[str]
    port_names: ClassVar[tuple[str, ...]]
    """Ports to allocate; the first one is the client port published in ``env``."""
    host: str = LOOPBACK
    cgroup: Path | None = None
    """A cgroup v2 to launch the process in (``cgroups.py``); a group's members have one."""
    ready_timeout: ClassVar[float] = 180.0
    stop_timeout: ClassVar[float] = 30.0

    def __init__(self, state_dir: Path | None = None, cache_dir: Path | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.cache_dir = (cache_dir or default_cache_dir()).resolve()
        self.dir = self.state_dir / self.name

    # --- layout ---------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def conf_dir(self) -> Path:
        return self.dir / "conf"

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def pid_path(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def env_path(self) -> Path:
        return self.dir / "env"

    @property
    def _instance_path(self) -> Path:
        return self.dir / "instance.json"

    @property
    def _lock_path(self) -> Path:
        # Outside self.dir so that destroy() can delete the directory while locked.
        return self.state_dir / f".{self.name}.lock"

    # --- what subclasses provide ----------------------------------------------

    @abc.abstractmethod
    def fetch(self) -> None:
        """Make the binaries available in the cache dir; must be cheap when already cached."""

    @abc.abstractmethod
    def configure(self, ports: Mapping[str, int]) -> LaunchSpec:
        """Write config files for ``ports`` (re-done on every start) and say how to launch."""

    @abc.abstractmethod
    def probe(self, port: int, timeout: float) -> str:
        """Return a description (e.g. the version) if ready, else raise ProbeError/OSError."""

    def crash_refusal(self, pid: int) -> str | None:
        """Why a kill -9 of the running process ``pid`` would make a false result (it
        would lose data on purpose), or None: most servers are crash-safe."""
        return None

    def launched_otherwise(self, pid: int) -> str | None:
        """How the running process ``pid`` was launched differently from what this
        instance would launch (options apply only at launch), or None."""
        return None

    # --- lifecycle --------------------------------------------------------------

    def start(self, timeout: float | None = None) -> Running:
        """Start the server, or reuse it if it already runs; return once it is ready.

        Idempotent: a live server is only probed.  A crashed or stopped one is
        started again on its recorded ports with its data dir intact, which is
        what restart-after-kill fault tests rely on.
        """
        timeout = self.ready_timeout if timeout is None else timeout
        self.fetch()
        with file_lock(self._lock_path):
            ports = self._ports()
            pid = read_pid_file(self.pid_path)
            if pid is not None:
                log.info("%s already running (pid %d); checking readiness", self.name, pid)
                detail = self._wait_ready(pid, ports, timeout, kill_on_failure=False)
                differs = self.launched_otherwise(pid)
                if differs:
                    log.warning(
                        "%s: reusing the running one, %s; options apply at launch: stop "
                        "it (down) to launch it with them",
                        self.name,
                        differs,
                    )
            else:
                pid = self._launch(ports)
                detail = self._wait_ready(pid, ports, timeout, kill_on_failure=True)
            self._write_env(ports)
        return Running(self, pid, ports, detail)

    def attach(self) -> Running | None:
        """A handle on the running instance (e.g. one started by the CLI), or None; no probing."""
        pid = read_pid_file(self.pid_path)
        ports = self.stored_ports()
        if pid is None or ports is None:
            return None
        return Running(self, pid, ports, detail="")

    def stop(self, timeout: float | None = None) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``) and keep its data."""
        with file_lock(self._lock_path):
            self._stop_locked(self.stop_timeout if timeout is None else timeout)

    def destroy(self, timeout: float | None = None) -> None:
        """Stop the process and delete all its state: data, config, logs, ports."""
        with file_lock(self._lock_path):
            self._stop_locked(self.stop_timeout if timeout is None else timeout)
            shutil.rmtree(self.dir, ignore_errors=True)

    def down(self, *, keep_data: bool = False) -> None:
        """Stop the process; delete its state unless ``keep_data``."""
        if keep_data:
            self.stop()
        else:
            self.destroy()

    def status(self, timeout: float = 3.0) -> Status:
        """Whether the server runs and answers its readiness probe."""
        pid = read_pid_file(self.pid_path)
        ports = self.stored_ports()
        if pid is None or ports is None:
            kept = " (data kept)" if self.data_dir.is_dir() else ""
            return Status(self.name, False, False, None, None, f"stopped{kept}")
        address = f"{self.host}:{ports[self.port_names[0]]}"
        try:
            detail = self.probe(ports[self.port_names[0]], timeout)
        except (OSError, ProbeError) as exc:
            return Status(self.name, True, False, pid, address, f"probe failed: {exc}")
        return Status(self.name, True, True, pid, address, detail)

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        """Environment variables a client needs, e.g. ``CLOCKWORK_CASSANDRA=127.0.0.1:PORT``."""
        return {self.env_var: f"{self.host}:{ports[self.port_names[0]]}"}

    # --- internals --------------------------------------------------------------

    def stored_ports(self) -> dict[str, int] | None:
        """The ports recorded for this instance, if any (kept across restarts)."""
        try:
            ports = json.loads(self._instance_path.read_text())["ports"]
        except (OSError, ValueError, KeyError):
            return None
        if not isinstance(ports, dict) or set(ports) != set(self.port_names):
            return None
        return {str(k): int(v) for k, v in ports.items()}

    def _ports(self) -> dict[str, int]:
        """The instance's ports: recorded ones (so restarts keep them), else fresh free ones."""
        ports = self.stored_ports()
        if ports is None:
            ports = {}
            for port_name in self.port_names:
                ports[port_name] = pick_free_port(self.host, exclude=list(ports.values()))
            self.record_ports(ports)
        return ports

    def record_ports(self, ports: Mapping[str, int]) -> None:
        """Record the instance's ports (a group chooses its members' before they start)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._instance_path.write_text(json.dumps({"ports": dict(ports)}, indent=1) + "\n")

    def _launch(self, ports: Mapping[str, int]) -> int:
        busy = self._busy_ports(ports)
        if busy:
            raise InfraError(
                f"{self.name}: port(s) {busy} on {self.host} are taken by another process; "
                f"run `python -m e2e.infra down {self.name}` to start afresh on new ports"
            )
        for directory in (self.dir, self.data_dir, self.conf_dir):
            directory.mkdir(parents=True, exist_ok=True)
        spec = self.configure(ports)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self.log_path.open("a") as fh:
            fh.write(f"\n=== clockwork-infra: starting {self.name} at {stamp} ===\n")
        log.info("starting %s on %s (log: %s)", self.name, dict(ports), self.log_path)
        try:
            argv = spec.argv if self.cgroup is None else launched_in(self.cgroup, spec.argv)
            pid = spawn_daemon(argv, cwd=spec.cwd, env=spec.env, log_path=self.log_path)
        except SpawnError as exc:
            raise InfraError(f"{self.name}: {exc}") from exc
        write_pid_file(self.pid_path, pid)
        return pid

    def _busy_ports(self, ports: Mapping[str, int], grace: float = 5.0) -> list[int]:
        """Ports still bound by someone, after up to ``grace`` s for a just-killed process."""
        deadline = time.monotonic() + grace
        while True:
            busy = [port for port in ports.values() if not port_is_free(port, self.host)]
            if not busy or time.monotonic() >= deadline:
                return busy
            time.sleep(0.2)

    def _wait_ready(
        self, pid: int, ports: Mapping[str, int], timeout: float, *, kill_on_failure: bool
    ) -> str:
        """Probe until ready; on death or timeout raise InfraError with the log's tail."""
        port = ports[self.port_names[0]]
        started = time.monotonic()
        deadline = started + timeout
        last_error = "no probe yet"
        while True:
            if not is_alive(pid):
                # Children it started (a supervisor's components) may live on in its
                # process group: take them down too, or they hold ports and memory.
                kill_group(pid)
                self.pid_path.unlink(missing_ok=True)
                raise self._failure(f"{self.name} (pid {pid}) exited during startup")
            remaining = deadline - time.monotonic()
            try:
                detail = self.probe(port, max(1.0, min(5.0, remaining)))
            except (OSError, ProbeError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                took = time.monotonic() - started
                log.info(
                    "%s ready on %s:%d after %.1fs (%s)", self.name, self.host, port, took, detail
                )
                return detail
            if remaining <= 0:
                if kill_on_failure:
                    terminate_group(pid, 10.0)
                    self.pid_path.unlink(missing_ok=True)
                raise self._failure(
                    f"{self.name} not ready on {self.host}:{port} after {timeout:.0f}s "
                    f"(last probe: {last_error})"
                )
            time.sleep(0.5)

    def _failure(self, message: str) -> InfraError:
        lines = tail(self.log_path, LOG_TAIL_LINES)
        return InfraError(
            f"{message}\n--- last {LOG_TAIL_LINES} lines of {self.log_path} ---\n{lines}\n---"
        )

    def _stop_locked(self, timeout: float) -> None:
        pid = read_pid_file(self.pid_path)
        if pid is not None:
            log.info("stopping %s (pid %d)", self.name, pid)
            if not terminate_group(pid, timeout):
                log.warning("%s did not stop within %.0fs; killed it", self.name, timeout)
        self.pid_path.unlink(missing_ok=True)
        # A stopped server must not be advertised to clients any more.
        self.env_path.unlink(missing_ok=True)
        rebuild_state_env(self.state_dir)

    def _write_env(self, ports: Mapping[str, int]) -> None:
        write_env(self.env_path, self.env(ports))


def write_env(path: Path, env: Mapping[str, str]) -> None:
    """Write one server's ``env`` file, then regenerate ``<state>/env`` beside its directory."""
    path.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
    rebuild_state_env(path.parent.parent)


def rebuild_state_env(state_dir: Path) -> None:
    """Regenerate ``<state>/env`` from the per-server ``env`` files."""
    with file_lock(state_dir / ".env.lock"):
        parts = [p.read_text() for p in sorted(state_dir.glob("*/env"))]
        target = state_dir / "env"
        if not parts:
            target.unlink(missing_ok=True)
            return
        tmp = target.with_suffix(".tmp")
        tmp.write_text("".join(parts))
        tmp.replace(target)


class Running:
    """A started server: where to reach it and how to stop, crash or restart it.

    ``restart()`` keeps the ports and the data dir, so a test can ``kill()``
    the server mid-flight and bring the same instance back.
    """

    def __init__(self, server: Server, pid: int, ports: Mapping[str, int], detail: str) -> None:
        self.server = server
        self.pid = pid
        self.ports = dict(ports)
        self.detail = detail
        """What the readiness probe returned (for Cassandra: its release_version)."""

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        """The client port (Cassandra: the CQL native transport port)."""
        return self.ports[self.server.port_names[0]]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return self.server.env(self.ports)

    def is_alive(self) -> bool:
        return is_alive(self.pid)

    def stop(self, timeout: float | None = None) -> None:
        """Graceful stop (SIGTERM, SIGKILL after ``timeout``); data and ports are kept."""
        self.server.stop(timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would; data and ports are kept.
        Refused (InfraError) if the server was launched to be unsafe after a crash."""
        refusal = self.server.crash_refusal(self.pid)
        if refusal is not None:
            raise InfraError(f"{self.name}: not killed: {refusal}")
        kill_group(self.pid)

    def restart(self, timeout: float | None = None) -> Running:
        """Stop if running, start the same instance again, wait until ready; returns self."""
        if self.is_alive():
            self.server.stop()
        fresh = self.server.start(timeout)
        self.pid, self.ports, self.detail = fresh.pid, fresh.ports, fresh.detail
        return self

    def destroy(self) -> None:
        """Stop and delete all state (what ``python -m e2e.infra down`` does)."""
        self.server.destroy()

    def __enter__(self) -> Running:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"<Running {self.name} pid={self.pid} {self.address}>"


class VersionedServer(Server):
    """A server whose binaries are built or unpacked, per version, into
    ``<cache>/<dist_prefix>-<version>/bin``."""

    dist_prefix: ClassVar[str]
    default_version: ClassVar[str]

    def __init__(
        self,
        state_dir: Path | None = None,
        cache_dir: Path | None = None,
        *,
        version: str | None = None,
    ) -> None:
        super().__init__(state_dir, cache_dir)
        self.version = version or self.default_version

    @property
    def dist_dir(self) -> Path:
        return self.cache_dir / f"{self.dist_prefix}-{self.version}"

    @property
    def bin_dir(self) -> Path:
        return self.dist_dir / "bin"
