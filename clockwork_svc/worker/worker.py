"""The worker: scanners for the shards it owns, one due queue, bounded delivery.

Ownership comes from outside (all shards in single-worker mode, etcd leases in a
cluster): `add_shard` / `drop_shard` start and stop a shard's scanner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from clockwork_svc.abc import Clock, DeliverySink, Store
from clockwork_svc.domain.model import ClusterLayout, Firing
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.worker.dispatcher import Dispatcher, SecretSource
from clockwork_svc.worker.due_queue import DueQueue
from clockwork_svc.worker.shard_scanner import ScanSettings, ShardScanner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    scan: ScanSettings = field(default_factory=ScanSettings)
    max_concurrent_deliveries: int = 512
    # Wait this long for in-flight deliveries on shutdown before abandoning them
    # (an abandoned firing is not marked done, so the next owner delivers it).
    shutdown_grace_s: float = 10.0
    store_retry_delay_s: float = 1.0
    # How long a tenant's signing secrets are cached (a rotation takes effect within this).
    secret_cache_s: float = 10.0


class Worker:
    def __init__(
        self,
        store: Store,
        sink: DeliverySink,
        clock: Clock,
        layout: ClusterLayout,
        settings: WorkerSettings,
        metrics: Metrics,
        may_dispatch: Callable[[], bool] = lambda: True,
        secrets: SecretSource | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._layout = layout
        self._settings = settings
        self._metrics = metrics
        self._queue: DueQueue[tuple[Firing, ShardScanner]] = DueQueue(clock.now_ms)
        self._scanners: dict[int, ShardScanner] = {}
        self._scan_tasks: dict[int, asyncio.Task[None]] = {}
        self._deliveries: set[asyncio.Task[None]] = set()
        self._in_flight: dict[int, set[asyncio.Task[None]]] = {}
        self._may_dispatch = may_dispatch
        self._slots = asyncio.Semaphore(settings.max_concurrent_deliveries)
        self._dispatcher = Dispatcher(store, sink, clock, layout, metrics, self.offer, secrets)
        self._fire_task: asyncio.Task[None] | None = None

    @property
    def owned_shards(self) -> dict[int, int]:
        return {s: sc.epoch for s, sc in self._scanners.items() if sc.active}

    def start(self) -> None:
        self._fire_task = asyncio.create_task(self._fire_loop(), name="worker-fire-loop")

    def add_shard(self, shard: int, epoch: int) -> None:
        if shard in self._scanners and self._scanners[shard].active:
            return
        scanner = ShardScanner(
            shard, epoch, self._store, self._clock, self._settings.scan, self._enqueue
        )
        self._scanners[shard] = scanner
        self._scan_tasks[shard] = asyncio.create_task(scanner.run(), name=f"scan-shard-{shard}")
        self._metrics.shards_owned.set(len(self._scanners))

    async def release_shard(self, shard: int) -> None:
        """Stop scanning a shard and wait for its in-flight deliveries (clean hand-over)."""
        await self.drop_shard(shard)
        running = self._in_flight.get(shard, set())
        if running:
            await asyncio.wait(set(running), timeout=self._settings.shutdown_grace_s)

    async def drop_all_shards(self) -> None:
        """Stop every shard at once (ownership in doubt); in-flight deliveries go on."""
        for shard in list(self._scanners):
            await self.drop_shard(shard)

    async def drop_shard(self, shard: int) -> None:
        scanner = self._scanners.pop(shard, None)
        task = self._scan_tasks.pop(shard, None)
        if scanner is not None:
            scanner.active = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._metrics.shards_owned.set(len(self._scanners))

    def offer(self, firing: Firing) -> None:
        """A firing this process just wrote: fire it without waiting for a scan."""
        scanner = self._scanners.get(firing.shard)
        if scanner is not None:
            scanner.offer(firing)

    def _enqueue(self, firing: Firing, scanner: ShardScanner) -> None:
        self._queue.push(firing.fire_at_ms, (firing, scanner))
        self._metrics.due_backlog.inc()

    async def _fire_loop(self) -> None:
        while True:
            for _, (firing, scanner) in await self._queue.pop_due(1024):
                self._metrics.due_backlog.dec()
                if not scanner.active or not self._may_dispatch():
                    # Not (or no longer surely) ours: the next owner reads it again.
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(
                    self._deliver(firing, scanner), name=f"fire-{firing.firing_id[:12]}"
                )
                self._track(firing.shard, task)

    def _track(self, shard: int, task: asyncio.Task[None]) -> None:
        self._deliveries.add(task)
        in_flight = self._in_flight.setdefault(shard, set())
        in_flight.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._deliveries.discard(t)
            in_flight.discard(t)

        task.add_done_callback(done)

    async def _deliver(self, firing: Firing, scanner: ShardScanner) -> None:
        try:
            await self._dispatcher.handle(firing)
            scanner.finished(firing)
        except StoreUnavailable as exc:
            # Not done: try again shortly; the cursor stays behind this firing meanwhile.
            self._metrics.store_errors.labels("dispatch").inc()
            log.warning("firing %s: store unavailable, will retry: %s", firing.firing_id, exc)
            retry_at = self._clock.now_ms() + int(self._settings.store_retry_delay_s * 1000)
            self._queue.push(retry_at, (firing, scanner))
            self._metrics.due_backlog.inc()
        except Exception:
            log.exception("firing %s failed unexpectedly; will retry", firing.firing_id)
            retry_at = self._clock.now_ms() + int(self._settings.store_retry_delay_s * 1000)
            self._queue.push(retry_at, (firing, scanner))
            self._metrics.due_backlog.inc()
        finally:
            self._slots.release()

    async def stop(self) -> None:
        """Stop scanning, let in-flight deliveries finish (bounded), release shards."""
        for shard in list(self._scanners):
            await self.drop_shard(shard)
        if self._fire_task is not None:
            self._fire_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fire_task
        if self._deliveries:
            _, still_running = await asyncio.wait(
                set(self._deliveries), timeout=self._settings.shutdown_grace_s
            )
            for task in still_running:
                task.cancel()
            if still_running:
                await asyncio.wait(still_running)
                log.warning("abandoned %d in-flight deliveries at shutdown", len(still_running))
