"""Shard ownership through etcd leases (the only module that imports aetcd).

Keys, under `/clockwork/<cluster>/`:
- `workers/<id>`: a live worker, attached to its lease;
- `shards/<n>`: the owner of shard n (value = worker id), attached to the owner's lease,
  created only if absent (transaction on create_revision == 0). Its create revision is
  the shard's **epoch**, the fencing token that the store checks on every cursor write.

Each worker runs three loops under one lease: keepalive (every ttl/3, feeding the
LeaseGuard), a watch on the prefix (so changes propagate in well under a second), and
rebalancing (acquire free shards up to its fair share, release excess ones after
draining them). A keepalive error or a guard deadline stops dispatch for every shard
at once; the worker then starts over with a new lease.

A secured etcd (`EtcdSettings.security`): `connect` opens a TLS channel and
authenticates with a password when given (each session anew, so a token etcd forgot
in a restart costs one session), and `check_access` proves the settings at start-up;
etcd_access.py turns a refusal into one line naming the flag to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc

from clockwork_svc.abc import Clock
from clockwork_svc.coordination import assignment, endpoints, etcd_access
from clockwork_svc.coordination.etcd_access import EtcdAccessError
from clockwork_svc.coordination.lease_guard import LeaseGuard
from clockwork_svc.domain.load import ClusterLoad, ScaleDecision, WorkerLoad
from clockwork_svc.errors import ClockworkError, Unavailable
from clockwork_svc.settings import EtcdSecurity, EtcdSettings

log = logging.getLogger(__name__)

T = TypeVar("T")


class CoordinationError(ClockworkError):
    """etcd could not be reached, or the lease was lost."""


class ShardHost(Protocol):
    """What the coordinator drives: the worker."""

    def add_shard(self, shard: int, epoch: int) -> None: ...

    async def release_shard(self, shard: int) -> None:
        """Stop scanning the shard and wait for its in-flight deliveries."""

    async def drop_all_shards(self) -> None:
        """Stop at once (lease in doubt); in-flight deliveries are not awaited."""

    @property
    def owned_shards(self) -> dict[int, int]: ...


@dataclass(frozen=True, slots=True)
class ClusterView:
    revision: int
    workers: dict[str, dict[str, Any]]
    owners: dict[int, tuple[str, int]]  # shard -> (worker id, epoch)
    shard_count: int | None = None


# How long one connection attempt to etcd may take (TCP and the HTTP/2 handshake).
CONNECT_TIMEOUT_MS = 5_000
# A stopping worker's attempts to revoke its lease, and the pause between two.
REVOKE_ATTEMPTS = 3
REVOKE_RETRY_S = 0.2


_PLAIN = EtcdSecurity()


async def connect(
    endpoint: str, timeout_s: float = 5.0, first: int = 0, security: EtcdSecurity = _PLAIN
) -> aetcd.Client:
    """A client over one channel to every member that `endpoint` names (see
    clockwork_svc/coordination/endpoints.py): gRPC fails over between them, trying
    member `first` first. With `security.tls` the channel is TLS; with a password the
    client authenticates here, once (the token lasts while it is used and etcd runs)."""
    target = endpoints.grpc_target(endpoint, first)
    # Short reconnect backoff: after an etcd restart the default gRPC backoff keeps
    # failing calls for about half a second longer than needed. gRPC core also takes
    # `min_reconnect_backoff_ms` as the connect timeout of every attempt, so it stays
    # long: at 100 ms a handshake slower than the backoff (a loaded host) never
    # completed ("timed out before receiving SETTINGS frame").
    options: dict[str, Any] = {
        "grpc.initial_reconnect_backoff_ms": 100,
        "grpc.min_reconnect_backoff_ms": CONNECT_TIMEOUT_MS,
        "grpc.max_reconnect_backoff_ms": 500,
    }
    common = dict(
        username=security.username, password=security.password, timeout=max(1, int(timeout_s))
    )
    client: aetcd.Client
    if security.tls is None:
        # aetcd opens its channel on f"{host}:{port}" and has no parameter for a
        # target. Every target ends in ":PORT", so splitting it at its last colon gives
        # back the same string (scheme and member list included), and aetcd's own
        # connect() (stubs, authentication, watcher) stays as it is;
        # test_etcd_endpoints pins this.
        host, _, port = target.rpartition(":")
        client = aetcd.Client(host=host, port=int(port), options=options, **common)
    else:
        # The certificate is checked against the first member's own name, not against
        # the channel's authority (for a list, the whole list): endpoints.tls_name.
        options["grpc.ssl_target_name_override"] = endpoints.tls_name(endpoint, first)
        tls = await asyncio.to_thread(etcd_access.channel_credentials, security.tls)
        client = _TlsClient(target, tls, options=options, **common)
    try:
        await client.connect()
    except BaseException:
        await client.close()  # aetcd leaves the channel open when authentication fails
        raise
    return client


class _TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd is untyped
    """An aetcd client over a TLS channel.

    aetcd 1.0.0's `Client.connect()` opens only `rpc.insecure_channel` and takes no
    channel credentials, so this `connect()` is aetcd's own with a secure channel: the
    same stubs, authentication and watcher, so every other method of aetcd works
    unchanged. It takes the channel target whole (aetcd builds it from host and port).
    """

    _is_connecting: bool  # aetcd's; declared for the type checker

    def __init__(self, target: str, tls: grpc.ChannelCredentials, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._target = target
        self._tls = tls

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            self.channel = grpc.aio.secure_channel(
                self._target, self._tls, options=list(self._options.items())
            )
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                try:
                    reply = await self.auth_stub.Authenticate(request, timeout=self._timeout)
                except grpc.aio.AioRpcError as exc:
                    raise aetcd.ClientError(exc.details()) from exc
                self.metadata = (("token", reply.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = aetcd.Watcher(
                rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        finally:
            self._is_connecting = False


async def check_access(settings: EtcdSettings, *, write: bool, timeout_s: float = 5.0) -> None:
    """At start-up: connect as the process will, read the cluster's keys and (for
    `write`) prove it may write them, so that a TLS or credentials mistake ends start-up
    at once with EtcdAccessError, one line naming the setting to fix, rather than a
    coordinator retrying for ever. An etcd that does not answer (down, slow) only logs
    a warning: the coordinator and the load reader keep trying, as after any later
    trouble."""
    security = settings.security
    if security.password is not None and security.tls is None:
        log.warning(
            "etcd: the password for user %r goes to %s in plain text; set --etcd-tls-ca",
            security.username,
            settings.endpoint,
        )
    try:
        async with asyncio.timeout(timeout_s):
            client = await connect(settings.endpoint, security=security)
            try:
                for prefix in (settings.prefix, settings.load_prefix):
                    await client.get_prefix(prefix.encode(), keys_only=True)
                    if write:
                        await _check_write(client, f"{prefix}access-check".encode())
            finally:
                await client.close()
    except (aetcd.ClientError, grpc.aio.AioRpcError, OSError, TimeoutError, EtcdAccessError) as exc:
        problem = etcd_access.diagnose(exc, settings)
        if problem is not None:
            raise EtcdAccessError(problem) from exc
        log.warning("etcd at %s does not answer yet (%r); trying on", settings.endpoint, exc)


async def _check_write(client: aetcd.Client, key: bytes) -> None:
    """Whether the user may write `key`, without writing: etcd checks the permission of
    every request in a transaction, whichever branch runs, and this one's comparison
    never holds (no key has a negative version)."""
    await client.transaction(
        compare=[client.transactions.version(key) < 0],
        success=[client.transactions.put(key, b"")],
        failure=[],
    )


async def read_view(client: aetcd.Client, prefix: str) -> ClusterView:
    result = await client.get_prefix(prefix.encode())
    workers: dict[str, dict[str, Any]] = {}
    owners: dict[int, tuple[str, int]] = {}
    revision = 0
    shard_count = None
    for kv in result:
        key = kv.key.decode()[len(prefix) :]
        revision = max(revision, kv.mod_revision)
        if key.startswith("workers/"):
            try:
                workers[key[len("workers/") :]] = json.loads(kv.value)
            except ValueError:
                workers[key[len("workers/") :]] = {}
        elif key == "layout":
            shard_count = int(json.loads(kv.value).get("shard_count", 0)) or None
        elif key.startswith("shards/") and key[len("shards/") :].isdigit():
            owners[int(key[len("shards/") :])] = (kv.value.decode(), kv.create_revision)
    header = getattr(result, "header", None)
    if header is not None:
        revision = header.revision
    return ClusterView(revision, workers, owners, shard_count)


# Beside the load reports (a worker id has no "/"), so that the roles the api already
# has cover it.
SCALE_DECISION_KEY = "autoscaler/decision"


async def read_load(
    client: aetcd.Client, load_prefix: str
) -> tuple[list[WorkerLoad], ScaleDecision | None]:
    """Every live worker's latest load report (unreadable ones are skipped), and the
    autoscaler's latest decision."""
    reports = []
    decision = None
    for kv in await client.get_prefix(load_prefix.encode()):
        name = kv.key.decode()[len(load_prefix) :]
        try:
            if name == SCALE_DECISION_KEY:
                decision = ScaleDecision.from_json(kv.value)
            elif "/" not in name:
                reports.append(WorkerLoad.from_json(kv.value))
        except ValueError:
            log.warning("ignoring an unreadable load record at %s", kv.key.decode())
    return reports, decision


class EtcdLoadReader:
    """The API's view of the workers' load reports (GetClusterLoad); connects lazily and
    reconnects after an error, so an etcd outage fails calls, not the API process."""

    def __init__(self, settings: EtcdSettings, shard_count: int) -> None:
        self._settings = settings
        self._shard_count = shard_count
        self._client: aetcd.Client | None = None

    async def cluster_load(self) -> ClusterLoad:
        return await self._call(self._read)

    async def record_scale_decision(self, decision: ScaleDecision) -> None:
        async def put(client: aetcd.Client) -> None:
            key = self._settings.load_prefix + SCALE_DECISION_KEY
            await client.put(key.encode(), decision.to_json())

        await self._call(put)

    async def _call(self, action: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        try:
            try:
                return await action(await self._connected())
            except aetcd.exceptions.UnauthenticatedError:
                # The password's token is gone: etcd restarted, or the token went
                # unused longer than etcd's --auth-token-ttl. Authenticate again, once.
                await self.close()
                return await action(await self._connected())
        except (aetcd.ClientError, OSError, EtcdAccessError) as exc:
            await self.close()
            problem = etcd_access.diagnose(exc, self._settings) or repr(exc)
            raise Unavailable(f"etcd at {self._settings.endpoint}: {problem}") from exc

    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            self._client = await connect(self._settings.endpoint, security=self._settings.security)
        return self._client

    async def _read(self, client: aetcd.Client) -> ClusterLoad:
        reports, decision = await read_load(client, self._settings.load_prefix)
        view = await read_view(client, self._settings.prefix)
        owners = tuple(
            (shard, worker, epoch) for shard, (worker, epoch) in sorted(view.owners.items())
        )
        return ClusterLoad(tuple(reports), self._shard_count, len(view.owners), owners, decision)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


class EtcdCoordinator:
    def __init__(
        self,
        settings: EtcdSettings,
        host: ShardHost,
        shard_count: int,
        clock: Clock,
        on_change: Callable[[str, int], None] = lambda kind, shard: None,
        on_timing: Callable[[str, float], None] = lambda kind, seconds: None,
        load: Callable[[str], WorkerLoad] | None = None,
    ) -> None:
        self._settings = settings
        self._load = load
        self._host = host
        self._shard_count = shard_count
        self._clock = clock
        self._on_change = on_change
        self._on_timing = on_timing
        self.guard = LeaseGuard(settings.lease_ttl_s, settings.safety_margin_s)
        self._wake = asyncio.Event()
        self._stopping = False

    @property
    def worker_id(self) -> str:
        return self._settings.worker_id

    def may_dispatch(self) -> bool:
        return not self._stopping and self.guard.valid(self._clock.monotonic())

    async def run(self) -> None:
        """Hold a lease and shards until stopped; start over after any lease trouble,
        through the next etcd member: the one just used may be cut off in a minority,
        where it still accepts connections but cannot grant or keep a lease."""
        backoff = 0.5
        first_member = 0
        while not self._stopping:
            try:
                await self._session(first_member)
                backoff = 0.5
            except (CoordinationError, aetcd.ClientError, OSError, EtcdAccessError) as exc:
                problem = etcd_access.diagnose(exc, self._settings) or exc
                log.warning("coordination: %s; dropping all shards", problem)
                first_member += 1
            finally:
                await self._host.drop_all_shards()
                self.guard.lost()
            if not self._stopping:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def stop(self) -> None:
        """Release every shard cleanly, then the lease (SIGTERM path)."""
        self._stopping = True
        self._wake.set()

    async def _session(self, first_member: int) -> None:
        client = await connect(
            self._settings.endpoint, first=first_member, security=self._settings.security
        )
        try:
            sent = self._clock.monotonic()
            lease = await client.lease(self._settings.lease_ttl_s)
            self.guard.granted(sent, self._settings.lease_ttl_s)
            prefix = self._settings.prefix
            info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
            await client.put(
                f"{prefix}workers/{self.worker_id}".encode(), json.dumps(info).encode(), lease=lease
            )
            layout = json.dumps({"shard_count": self._shard_count}).encode()
            await client.put(f"{prefix}layout".encode(), layout)
            log.info(
                "coordination: worker %s registered (lease %x, ttl %ds)",
                self.worker_id,
                lease.id,
                self._settings.lease_ttl_s,
            )
            tasks = [
                asyncio.create_task(self._keepalive(client, lease), name="etcd-keepalive"),
                asyncio.create_task(self._watchdog(), name="etcd-lease-watchdog"),
                asyncio.create_task(self._watch(client), name="etcd-watch"),
            ]
            if self._load is not None:
                tasks.append(
                    asyncio.create_task(
                        self._report_load(client, lease, self._load), name="etcd-load-report"
                    )
                )
            try:
                await self._rebalance_loop(client, lease, tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._stopping:
                try:
                    await self._release_everything(client)
                finally:
                    # Also when a release failed: revoking the lease deletes every key
                    # under it (the registration, any shard key still held), so the
                    # others take over now rather than when the lease expires.
                    await self._revoke(client, lease)
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _revoke(self, client: aetcd.Client, lease: Any) -> None:
        """Revoke the lease, retrying a failed attempt a few times; if every one fails,
        the lease expires on its own (the others wait up to its TTL)."""
        for attempt in range(1, REVOKE_ATTEMPTS + 1):
            try:
                await client.revoke_lease(lease.id)
                return
            except (aetcd.ClientError, OSError) as exc:
                log.warning(
                    "coordination: lease not revoked (attempt %d of %d): %r",
                    attempt,
                    REVOKE_ATTEMPTS,
                    exc,
                )
                if attempt < REVOKE_ATTEMPTS:
                    await asyncio.sleep(REVOKE_RETRY_S)

    async def _keepalive(self, client: aetcd.Client, lease: Any) -> None:
        interval = self._settings.lease_ttl_s / 3
        while True:
            await asyncio.sleep(interval)
            sent = self._clock.monotonic()
            self.guard.keepalive_sent(sent)
            try:
                reply = await asyncio.wait_for(client.refresh_lease(lease.id), interval)
            except (TimeoutError, aetcd.ClientError, OSError) as exc:
                self.guard.lost()
                raise CoordinationError(f"keepalive failed: {exc!r}") from exc
            self._on_timing("keepalive", self._clock.monotonic() - sent)
            self.guard.keepalive_acked(float(getattr(reply, "TTL", 0)))
            if not self.guard.valid(self._clock.monotonic()):
                raise CoordinationError("lease expired")

    async def _report_load(
        self, client: aetcd.Client, lease: Any, load: Callable[[str], WorkerLoad]
    ) -> None:
        """Publish this worker's load under its lease, so it vanishes with the worker."""
        key = f"{self._settings.load_prefix}{self.worker_id}".encode()
        while True:
            await asyncio.sleep(self._settings.load_report_interval_s)
            try:
                await client.put(key, load(self.worker_id).to_json(), lease=lease)
            except (aetcd.ClientError, OSError) as exc:
                # Not a reason to drop shards: the keepalive loop judges the lease.
                log.warning("coordination: load report not published: %r", exc)

    async def _watchdog(self) -> None:
        while True:
            if not self.guard.valid(self._clock.monotonic()):
                raise CoordinationError("lease deadline passed without a keepalive answer")
            await asyncio.sleep(0.1)

    async def _watch(self, client: aetcd.Client) -> None:
        watch = await client.watch_prefix(self._settings.prefix.encode())
        async for _event in watch:
            self._wake.set()

    async def _rebalance_loop(
        self, client: aetcd.Client, lease: Any, tasks: list[asyncio.Task[None]]
    ) -> None:
        while not self._stopping:
            for task in tasks:
                if task.done():
                    exc = task.exception()
                    raise CoordinationError(f"{task.get_name()} ended: {exc!r}")
            # Cleared before the round, not after: a change that arrives while the round
            # runs must trigger another round at once, not wait for the timer.
            self._wake.clear()
            started = self._clock.monotonic()
            changed = await self._rebalance(client, lease)
            if changed:
                self._on_timing("rebalance", self._clock.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.rebalance_interval_s)

    async def _rebalance(self, client: aetcd.Client, lease: Any) -> bool:
        view = await read_view(client, self._settings.prefix)
        owners = {s: owner for s, (owner, _) in view.owners.items()}
        mine = {s: epoch for s, (owner, epoch) in view.owners.items() if owner == self.worker_id}
        # Keys naming us that the worker does not scan: left from an earlier lease, or the
        # scanner was fenced off. Give them up; the plan below re-acquires them under a
        # new epoch (a newer etcd revision) if they are still ours to own.
        for shard, epoch in list(mine.items()):
            if shard not in self._host.owned_shards:
                await self._delete_key(client, shard, epoch)
                del mine[shard]
                del owners[shard]
        for shard in list(self._host.owned_shards):
            if shard not in mine:  # our key vanished: someone else may own it now
                await self._host.release_shard(shard)
                self._on_change("lost", shard)
        workers = list(view.workers) or [self.worker_id]
        plan = assignment.plan(
            self.worker_id, workers, owners, self._shard_count, self._settings.max_acquire_per_round
        )
        # Concurrently: a hand-over of many shards (a worker joining or leaving) costs
        # one round trip, not one per shard, so their firings wait for no queue.
        await _all(self._release(client, shard, mine[shard]) for shard in plan.release)
        await _all(self._acquire(client, lease, shard) for shard in plan.acquire)
        return bool(plan.acquire or plan.release)

    async def _acquire(self, client: aetcd.Client, lease: Any, shard: int) -> None:
        if not self.may_dispatch():
            return
        key = f"{self._settings.prefix}shards/{shard}".encode()
        ok, responses = await client.transaction(
            compare=[client.transactions.create(key) == 0],
            success=[client.transactions.put(key, self.worker_id.encode(), lease=lease)],
            failure=[],
        )
        if not ok:
            return
        epoch = int(responses[0].response_put.header.revision)
        self._host.add_shard(shard, epoch)
        self._on_change("acquired", shard)

    async def _release(self, client: aetcd.Client, shard: int, epoch: int) -> None:
        await self._host.release_shard(shard)
        await self._delete_key(client, shard, epoch)
        self._on_change("released", shard)

    async def _delete_key(self, client: aetcd.Client, shard: int, epoch: int) -> None:
        key = f"{self._settings.prefix}shards/{shard}".encode()
        await client.transaction(
            compare=[
                client.transactions.value(key) == self.worker_id.encode(),
                client.transactions.create(key) == epoch,
            ],
            success=[client.transactions.delete(key)],
            failure=[],
        )

    async def _release_everything(self, client: aetcd.Client) -> None:
        view = await read_view(client, self._settings.prefix)
        await _all(
            self._release(client, shard, epoch)
            for shard, (owner, epoch) in view.owners.items()
            if owner == self.worker_id
        )


async def _all(steps: Iterable[Awaitable[None]]) -> None:
    """Run ``steps`` concurrently; once every one has ended, raise the first error."""
    for outcome in await asyncio.gather(*steps, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


async def cluster_status(
    endpoint: str, cluster: str, security: EtcdSecurity = _PLAIN
) -> ClusterView:
    """The cluster's workers and shard owners; EtcdAccessError names the setting to fix
    when etcd refuses the TLS settings or credentials."""
    settings = EtcdSettings(endpoint=endpoint, cluster=cluster, security=security)
    try:
        client = await connect(endpoint, security=security)
        try:
            return await read_view(client, settings.prefix)
        finally:
            await client.close()
    except (aetcd.ClientError, OSError) as exc:
        problem = etcd_access.diagnose(exc, settings)
        if problem is None:
            raise
        raise EtcdAccessError(problem) from exc
