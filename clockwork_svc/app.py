"""The composition root: wires store, API, worker and ops endpoint for each process
kind (`dev`, `api`, `worker`) and runs it until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from clockwork_svc import gc_policy
from clockwork_svc.abc import Clock, Store, SystemClock
from clockwork_svc.api import http_rules, openapi
from clockwork_svc.cluster_load import LoadSource, LocalLoad
from clockwork_svc.dashboard.pages import Dashboard
from clockwork_svc.dead_letters import DeadLetters
from clockwork_svc.delivery.http import HttpSink
from clockwork_svc.delivery.kafka import KafkaSink
from clockwork_svc.delivery.routing import RoutingSink
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.observability.http_server import OpsServer
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.server.grpc_server import SERVICES, RunningServer, start_server
from clockwork_svc.server.http_gateway import API_VERSION, HttpGateway, server_tls
from clockwork_svc.settings import ProcessSettings
from clockwork_svc.tenancy import TenantAdmin, TenantView, TokenDirectory
from clockwork_svc.timekeeping import StoreClock, WriteTimestamps
from clockwork_svc.worker.worker import Worker

if TYPE_CHECKING:
    from clockwork_svc.coordination.etcd import EtcdLoadReader, ShardHost

log = logging.getLogger(__name__)


class EtcdCoordinatorLike(Protocol):
    def may_dispatch(self) -> bool: ...

    async def stop(self) -> None: ...


async def open_store(settings: ProcessSettings, clock: Clock, *, serves_api: bool) -> Store:
    """`serves_api`: an api's schedule reads answer a waiting client, so they do not
    linger (`CassandraSettings.batch_linger_ms`)."""
    layout = ClusterLayout(settings.layout.shard_count, settings.layout.bucket_ms, clock.now_ms())
    if settings.store.kind == "sqlite":
        from clockwork_svc.storage.sqlite import SqliteStore

        return await SqliteStore.open(settings.store.sqlite_path, layout)
    from clockwork_svc.storage import cassandra

    c = settings.store.cassandra
    return await cassandra.CassandraStore.open(
        list(c.contact_points),
        c.keyspace,
        local_dc=c.local_dc,
        username=c.username,
        password=c.password,
        tls=c.tls,
        connect_timeout_s=c.connect_timeout_s,
        write_batch=c.write_batch,
        batch_linger_s=c.batch_linger_ms / 1000,
        read_linger_s=0.0 if serves_api else c.batch_linger_ms / 1000,
        speculative_delay_s=c.speculative_delay_ms / 1000,
    )


@dataclass
class Node:
    """A running process: any of api and worker, plus the ops endpoint."""

    store: Store
    metrics: Metrics
    layout: ClusterLayout
    api: RunningServer | None = None
    http: HttpGateway | None = None
    worker: Worker | None = None
    ops: OpsServer | None = None
    sink: RoutingSink | None = None
    coordinator: EtcdCoordinatorLike | None = None
    coordinator_task: asyncio.Task[None] | None = None
    load_reader: EtcdLoadReader | None = None
    tracing: Tracing = field(default_factory=Tracing)
    extra_tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self, settings: ProcessSettings) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.api is not None:
            await self.api.stop(settings.api.shutdown_grace_s)
        if self.coordinator is not None:
            await self.coordinator.stop()
            if self.coordinator_task is not None:
                await asyncio.wait(
                    [self.coordinator_task], timeout=settings.worker.shutdown_grace_s
                )
                self.coordinator_task.cancel()
        if self.worker is not None:
            await self.worker.stop()
        if self.sink is not None:
            await self.sink.close()
        for task in self.extra_tasks:
            task.cancel()
        await asyncio.gather(*self.extra_tasks, return_exceptions=True)
        if self.ops is not None:
            await self.ops.stop()
        if self.load_reader is not None:
            await self.load_reader.close()
        await self.store.close()
        # The SDK's flush is blocking I/O (bounded by its export timeout).
        await asyncio.to_thread(self.tracing.shutdown)


async def start_node(
    settings: ProcessSettings,
    *,
    api: bool,
    worker: bool,
    clock: Clock | None = None,
) -> Node:
    if settings.etcd is not None:
        # Before the store: a TLS or credentials mistake ends start-up at once.
        from clockwork_svc.coordination import etcd as etcd_coordination

        await etcd_coordination.check_access(settings.etcd, write=worker)
    metrics = Metrics()
    store_clock: StoreClock | None = None
    if clock is None and settings.store.kind == "cassandra":
        clock = store_clock = StoreClock()
    clock = clock or SystemClock()
    store = await open_store(settings, clock, serves_api=api)
    layout = await store.layout()
    node = Node(store, metrics, layout, tracing=_tracing(settings, api=api, worker=worker))
    try:
        if store_clock is not None:
            await _use_cluster_time(node, store_clock, metrics)
        if worker:
            _start_worker(node, settings, clock)
        if api:
            on_new = node.worker.offer if node.worker is not None else (lambda firing: None)
            scheduling = Scheduling(
                store,
                clock,
                layout,
                settings.api.limits,
                settings.targets,
                on_new_firing=on_new,
                on_created=metrics.schedules_created.inc,
                on_create_batch=metrics.create_batch.observe,
            )
            node.api = await start_server(
                scheduling,
                DeadLetters(store, clock, on_new),
                TenantAdmin(store, clock),
                TokenDirectory(store, clock, settings.api.token_cache_s),
                metrics,
                settings.api.listen,
                settings.api.auth,
                settings.api.tls,
                load=_load_source(node, settings),
                max_message_bytes=settings.api.max_message_bytes,
                max_in_flight=settings.api.max_in_flight,
                tracing=node.tracing,
            )
            if settings.api.http_listen is not None:
                node.http = await _start_http(node.api, settings)
        node.extra_tasks.append(
            asyncio.create_task(_measure_loop_lag(metrics), name="loop-lag-monitor")
        )
        node.ops = OpsServer(
            metrics,
            ready=lambda: True,
            alive=lambda: node.worker is None or node.worker.alive,
        )
        await node.ops.start(settings.ops.host, settings.ops.port)
    except BaseException:
        await node.stop(settings)
        raise
    return node


def _tracing(settings: ProcessSettings, *, api: bool, worker: bool) -> Tracing:
    endpoint = settings.ops.otlp_endpoint
    if not endpoint:
        return Tracing()
    kind = "+".join(name for name, on in (("api", api), ("worker", worker)) if on)
    return Tracing.exporting(endpoint, service=f"clockwork-{kind}")


async def _start_http(api: RunningServer, settings: ProcessSettings) -> HttpGateway:
    table = http_rules.routes(SERVICES)
    gateway = HttpGateway(
        api.local_calls,
        table,
        openapi.document(table, version=API_VERSION),
        # JSON spells bytes in base64: 4/3 of their size, plus the rest of the message.
        max_body_bytes=2 * settings.api.max_message_bytes,
        dashboard=Dashboard(api.local_calls, secure_cookies=settings.api.tls is not None),
    )
    host, port = settings.api.http_listen or ("", 0)
    tls = settings.api.tls
    await gateway.start(host, port, server_tls(tls) if tls is not None else None)
    return gateway


async def _use_cluster_time(node: Node, clock: StoreClock, metrics: Metrics) -> None:
    """Anchor `clock` on the store's clock, stamp the store's writes with it, keep it
    anchored (`clockwork_svc.timekeeping`)."""
    store = node.store
    store.use_write_timestamps(WriteTimestamps(clock))
    try:
        await clock.sync(store.server_time_ms)
    except StoreUnavailable as exc:  # keep_synced retries; until then the host's clock
        log.warning("cluster time: cannot sample the store's clock yet: %s", exc)
    metrics.host_clock_skew.set_function(lambda: clock.host_skew_ms() / 1000)
    node.extra_tasks.append(
        asyncio.create_task(clock.keep_synced(store.server_time_ms), name="cluster-time")
    )


def _load_source(node: Node, settings: ProcessSettings) -> LoadSource | None:
    """The workers' reports in etcd; else this process's own worker; else none."""
    if settings.etcd is not None:
        from clockwork_svc.coordination.etcd import EtcdLoadReader

        node.load_reader = EtcdLoadReader(settings.etcd, node.layout.shard_count)
        return node.load_reader
    if node.worker is not None:
        worker = node.worker
        return LocalLoad(
            worker.load_report, "local", _load_window_s(settings), lambda: worker.owned_shards
        )
    return None


def _load_window_s(settings: ProcessSettings) -> float:
    """Load reports count the firings prefetched ahead of time: the scan lookahead."""
    return settings.worker.scan.lookahead_ms / 1000


async def _measure_loop_lag(metrics: Metrics, interval_s: float = 0.25) -> None:
    """Event-loop lag: how late a timer fires. Lag delays firings and lease keepalives."""
    loop = asyncio.get_running_loop()
    while True:
        expected = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        metrics.loop_lag.observe(max(0.0, loop.time() - expected))


def _start_worker(node: Node, settings: ProcessSettings, clock: Clock) -> None:
    node.metrics.shard_count.set(node.layout.shard_count)
    node.sink = sink = RoutingSink(HttpSink(settings.targets), KafkaSink(settings.kafka))
    unsafe = settings.unsafe_disable_fencing_for_tests
    store = node.store
    if unsafe:
        from clockwork_svc.testing import fencing_off

        log.warning(fencing_off.WARNING)
        store = cast(Store, fencing_off.UnfencedStore(node.store))
    gate = _DispatchGate(coordinated=settings.etcd is not None, unsafe_ignore_lease=unsafe)
    node.worker = worker = Worker(
        store,
        sink,
        clock,
        node.layout,
        settings.worker,
        node.metrics,
        may_dispatch=gate,
        tenants=TenantView(node.store, clock, settings.worker.tenant_cache_s),
        tracing=node.tracing,
    )
    node.worker.start()
    if settings.etcd is None:
        # Without a coordinator this worker owns every shard. Its epoch is its start time,
        # so a newer worker fences an older one instead of both firing.
        epoch = clock.now_ms()
        for shard in range(node.layout.shard_count):
            node.worker.add_shard(shard, epoch)
        return
    from clockwork_svc.coordination.etcd import EtcdCoordinator

    metrics = node.metrics
    coordinator = EtcdCoordinator(
        settings.etcd,
        _coordinated_host(node.worker, unsafe),
        node.layout.shard_count,
        clock,
        on_change=lambda kind, shard: metrics.ownership_changes.labels(kind).inc(),
        on_timing=lambda kind, seconds: (
            metrics.keepalive_latency if kind == "keepalive" else metrics.rebalance_duration
        ).observe(seconds),
        load=lambda worker_id: worker.load_report(worker_id, _load_window_s(settings)),
    )
    gate.coordinator = coordinator
    node.coordinator = coordinator
    node.coordinator_task = asyncio.create_task(coordinator.run(), name="etcd-coordinator")


def _coordinated_host(worker: Worker, unsafe: bool) -> ShardHost:
    if not unsafe:
        return worker
    from clockwork_svc.testing import fencing_off

    return fencing_off.UnsafeHost(worker)


class _DispatchGate:
    """Whether the worker may dispatch: always without a coordinator; with one, only
    while its lease still surely holds (and not before the coordinator exists).
    `unsafe_ignore_lease` (tests only) drops the lease condition."""

    def __init__(self, coordinated: bool, unsafe_ignore_lease: bool = False) -> None:
        self.coordinated = coordinated
        self.unsafe_ignore_lease = unsafe_ignore_lease
        self.coordinator: EtcdCoordinatorLike | None = None

    def __call__(self) -> bool:
        if not self.coordinated:
            return True
        if self.unsafe_ignore_lease:
            return self.coordinator is not None
        return self.coordinator is not None and self.coordinator.may_dispatch()


@contextlib.asynccontextmanager
async def running(
    settings: ProcessSettings, *, api: bool, worker: bool, clock: Clock | None = None
) -> AsyncIterator[Node]:
    node = await start_node(settings, api=api, worker=worker, clock=clock)
    try:
        yield node
    finally:
        await node.stop(settings)


def _collect_when_idle(node: Node, worker: Worker, threshold: int) -> None:
    """A worker collects between deliveries (gc_policy.collect_when_idle)."""
    if not threshold:
        log.info("gc: idle collections off (--gc-idle-threshold 0)")
        return
    node.extra_tasks.append(
        asyncio.create_task(
            gc_policy.collect_when_idle(worker.quiet_ms, threshold), name="gc-when-idle"
        )
    )
    log.info(
        "gc: the worker collects early, with nothing to send for %d ms, once the young "
        "generation holds %d allocations",
        gc_policy.IDLE_QUIET_MS,
        threshold,
    )


async def serve(settings: ProcessSettings, *, api: bool, worker: bool) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with running(settings, api=api, worker=worker) as node:
        gc_policy.freeze_startup_heap(settings.ops.gc_young_threshold)
        gc_policy.observe_pauses(node.metrics.gc_paused)
        if node.worker is not None:
            _collect_when_idle(node, node.worker, settings.ops.gc_idle_threshold)
        parts = [name for name, on in (("api", api), ("worker", worker)) if on]
        log.info(
            "clockwork %s started: grpc port %s, http port %s, ops port %s, %d shards",
            "+".join(parts),
            node.api.port if node.api else "-",
            node.http.port if node.http else "-",
            node.ops.port if node.ops else "-",
            node.layout.shard_count,
        )
        if node.http is not None and settings.api.http_listen is not None:
            host = settings.api.http_listen[0]
            scheme = "https" if settings.api.tls is not None else "http"
            base = f"{scheme}://{host}:{node.http.port}"
            log.info(
                "dashboard at %s/ui, HTTP/JSON API at %s/v1 (OpenAPI: /v1/openapi.json)", base, base
            )
        await stop.wait()
        log.info("shutting down")
