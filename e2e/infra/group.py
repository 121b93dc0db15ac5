"""Several members of one server type run as one cluster: the lifecycle they share.

A group (three Cassandra nodes, three etcd members) is managed like one server by
the CLI (``python -m e2e.infra up cassandra-cluster``): ``fetch``, ``start``,
``down``, ``status``. Each member is an ordinary :class:`~e2e.infra.server.Server`
with a state directory of its own under ``<state>/<group>/members/``; the group
chooses every member's ports before any of them starts (each member's config names
its peers), starts them all at once (a fresh cluster with its topology given needs
no member to wait for another), waits until they have formed one cluster, and
publishes one ``env`` line listing every member.

A member can be killed, stopped and restarted on its own through its
:class:`~e2e.infra.server.Running` handle (``group.members[1].kill()``): the fault
tests of the replicated stores do exactly that.
"""

from __future__ import annotations

import abc
import logging
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import cgroups
from .paths import default_state_dir
from .server import InfraError, ProbeError, Running, Server, Status, rebuild_state_env, write_env

log = logging.getLogger(__name__)


class ServerGroup(abc.ABC):
    """A fixed set of members of one server type, managed together."""

    name: ClassVar[str]
    env_var: ClassVar[str]
    form_timeout: ClassVar[float] = 120.0
    """How long the members may take to see each other once each one is ready."""

    def __init__(self, state_dir: Path | None = None, cache_dir: Path | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.cache_dir = cache_dir
        self.dir = self.state_dir / self.name
        self.members_dir = self.dir / "members"

    @property
    @abc.abstractmethod
    def members(self) -> Sequence[Server]:
        """The member servers, in a fixed order (the first is the seed where one is needed)."""

    @abc.abstractmethod
    def choose_ports(self) -> list[dict[str, int]]:
        """Free ports for every member, in member order (each config names its peers')."""

    def assign_ports(self) -> None:
        """Record every member's ports unless they are recorded already (restarts keep them)."""
        if all(member.stored_ports() is not None for member in self.members):
            return
        for member, ports in zip(self.members, self.choose_ports(), strict=True):
            member.record_ports(ports)

    def client_env(self) -> dict[str, str]:
        """What clients need beside the addresses (a secured group's login and certificates)."""
        return {}

    @abc.abstractmethod
    def formed(self, running: Sequence[Running], timeout: float) -> str:
        """A description if the ready members form one cluster; else raise ProbeError/OSError."""

    def fetch(self) -> None:
        self.members[0].fetch()

    def start(self, timeout: float | None = None) -> RunningGroup:
        """Start the members not running, all at once; return once they form one cluster."""
        self.fetch()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.assign_ports()
        self._in_own_cgroups()
        started = time.monotonic()
        with ThreadPoolExecutor(len(self.members)) as pool:
            running = list(pool.map(lambda member: member.start(timeout), self.members))
        detail = self.wait_formed(running)
        took = time.monotonic() - started
        log.info("%s: %d members formed one cluster in %.1fs", self.name, len(running), took)
        group = RunningGroup(self, running, f"{detail}; formed in {took:.1f}s")
        write_env(self.dir / "env", group.env)
        return group

    def _in_own_cgroups(self) -> None:
        """Each member is launched in a cgroup of its own (cgroups.py), where there are."""
        for member in self.members:
            member.cgroup = cgroups.own_cgroup(member.dir)

    def wait_formed(self, running: Sequence[Running]) -> str:
        deadline = time.monotonic() + self.form_timeout
        while True:
            try:
                return self.formed(running, 5.0)
            except (OSError, ProbeError) as exc:
                if time.monotonic() >= deadline:
                    raise InfraError(
                        f"{self.name}: members ready but not one cluster after "
                        f"{self.form_timeout:.0f}s: {exc}"
                    ) from exc
            time.sleep(0.5)

    def attach(self) -> RunningGroup | None:
        """Handles on the running members (started by the CLI), or None if one is missing."""
        self._in_own_cgroups()  # a member restarted through its handle goes back into it
        running = [member.attach() for member in self.members]
        if any(r is None for r in running):
            return None
        return RunningGroup(self, [r for r in running if r is not None], "")

    def down(self, *, keep_data: bool = False) -> None:
        for member in reversed(self.members):
            member.down(keep_data=keep_data)
            cgroups.remove(member.dir)
        (self.dir / "env").unlink(missing_ok=True)
        if not keep_data:
            shutil.rmtree(self.dir, ignore_errors=True)
        rebuild_state_env(self.state_dir)

    def status(self) -> Status:
        statuses = [member.status() for member in self.members]
        ready = all(s.ready for s in statuses)
        running = all(s.running for s in statuses)
        address = ",".join(s.address or "-" for s in statuses)
        detail = "; ".join(f"{s.name}: {s.detail}" for s in statuses)
        if not any(s.running for s in statuses):
            return Status(self.name, False, False, None, None, "stopped")
        return Status(self.name, running, ready, statuses[0].pid, address, detail)


@dataclass
class RunningGroup:
    """A formed cluster: every member's handle, and the addresses clients are given."""

    group: ServerGroup
    members: list[Running]
    detail: str

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def addresses(self) -> list[str]:
        return [member.address for member in self.members]

    @property
    def address(self) -> str:
        """Every member's client address, comma-separated (what the env line carries)."""
        return ",".join(self.addresses)

    @property
    def env(self) -> dict[str, str]:
        return {self.group.env_var: self.address, **self.group.client_env()}

    @property
    def pid(self) -> int:
        return self.members[0].pid

    def restore(self) -> None:
        """Restart every member that is not running (after a fault test's kill)."""
        for member in self.members:
            if not member.is_alive():
                member.restart()

    def destroy(self) -> None:
        self.group.down()
