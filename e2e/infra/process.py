"""Process plumbing shared by every server the harness runs.

Servers are started as *detached daemons*: a short-lived launcher process
spawns the server in its own session (so its pid is also its process-group id)
and exits at once.  The server is therefore never a child of the Python
process that asked for it, which matters twice:

* ``python -m e2e.infra up`` can exit while the server keeps running;
* a long-lived pytest process never accumulates zombies or Popen objects that
  warn "subprocess is still running" (pytest turns warnings into errors here).

A pid file stores ``<pid> <start time>``; the start time (from /proc) guards
against the pid having been reused by an unrelated process after a crash.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"

# Launched with ``python -c``: reads a JSON spec on stdin, starts the server in
# a new session with stdout/stderr appended to the log, prints its pid, exits.
_LAUNCHER = """\
import json, subprocess, sys
spec = json.load(sys.stdin)
with open(spec["log"], "ab", buffering=0) as log:
    child = subprocess.Popen(
        spec["argv"], cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
sys.stdout.write(str(child.pid))
"""


class SpawnError(RuntimeError):
    """The launcher could not start the program (e.g. the executable is missing)."""


def spawn_daemon(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path) -> int:
    """Start ``argv`` detached, in its own session, logging to ``log_path``; return its pid."""
    spec = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "log": str(log_path)}
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise SpawnError(f"could not launch {argv[0]}: {done.stderr.strip() or done.stdout}")
    return int(done.stdout.strip())


# --- liveness ---------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    return raw[raw.rindex(")") + 2 :].split()


_DEAD = ("Z", "X")


def process_start_time(pid: int) -> int | None:
    """Start time of a live (non-zombie) process in clock ticks since boot, else None.

    Zombies count as dead: an orphaned server is reparented to PID 1, which on
    some sandboxes never reaps it, yet its ports and files are already released.
    """
    fields = _proc_stat(pid)
    if fields is None or (fields[0] in _DEAD and not _threads_still_exiting(pid)):
        return None
    return int(fields[19])  # field 22 of /proc/<pid>/stat


def _threads_still_exiting(pid: int) -> bool:
    """Whether any thread of a zombie leader still runs.

    A multi-threaded process (any JVM) whose main thread has exited shows state
    Z while its other threads are still tearing down and holding its sockets;
    only when every thread is gone are its ports free again.
    """
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            raw = stat.read_text()
        except OSError:
            continue
        if raw[raw.rindex(")") + 2 :].split()[0] not in _DEAD:
            return True
    return False


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether ``pid`` runs (and, if given, is the same process that started at ``start_time``)."""
    started = process_start_time(pid)
    return started is not None and (start_time is None or started == start_time)


def write_pid_file(path: Path, pid: int) -> None:
    """Record ``pid`` with its start time, atomically."""
    started = process_start_time(pid)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{pid} {started if started is not None else 0}\n")
    tmp.replace(path)


def read_pid_file(path: Path) -> int | None:
    """The pid recorded in ``path`` if that very process still runs; None otherwise."""
    try:
        pid_text, start_text = path.read_text().split()
    except (OSError, ValueError):
        return None
    pid, started = int(pid_text), int(start_text)
    return pid if is_alive(pid, started or None) else None


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` is gone; True if it exited within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while is_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to a whole process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def terminate_group(pgid: int, timeout: float) -> bool:
    """SIGTERM the group led by ``pgid``, SIGKILL after ``timeout`` s; True if graceful."""
    signal_group(pgid, signal.SIGTERM)
    graceful = wait_for_exit(pgid, timeout)
    if not graceful:
        signal_group(pgid, signal.SIGKILL)
        wait_for_exit(pgid, 10.0)
    # Stragglers that the leader left behind in its group.
    signal_group(pgid, signal.SIGKILL)
    return graceful


def kill_group(pgid: int) -> None:
    """SIGKILL the group at once, as a crash would (for fault-injection tests)."""
    signal_group(pgid, signal.SIGKILL)
    wait_for_exit(pgid, 10.0)


# --- ports --------------------------------------------------------------------


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a listener could bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _ephemeral_low() -> int:
    """Lowest port the kernel hands out for outgoing connections (32768 if unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def pick_free_port(host: str = LOOPBACK, exclude: Sequence[int] = ()) -> int:
    """A port on ``host`` that is free now, chosen below the ephemeral range.

    ``bind(0)`` would pick from the ephemeral range, where any outgoing
    connection (e.g. a test's client) may grab the port between our choice and
    the server's bind several seconds later; random ports below it avoid that.
    """
    high = _ephemeral_low() - 1
    low = min(20000, high - 1000)
    for _ in range(200):
        port = random.randint(low, high)
        if port not in exclude and port_is_free(port, host):
            return port
    raise OSError(f"no free port found on {host} in {low}-{high}")


def tcp_port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (not proof of readiness)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- files --------------------------------------------------------------------


def tail(path: Path, lines: int = 50) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if needed) for the block.

    Serialises concurrent ``up``/``down`` runs, e.g. two pytest workers that
    both want the same server, or a resolve racing another resolve.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
