"""The worker: scanners for the shards it owns, one due queue, bounded delivery.

Ownership comes from outside (all shards in single-worker mode, etcd leases in a
cluster): `add_shard` / `drop_shard` start and stop a shard's scanner.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from clockwork_svc.abc import Clock, DeliverySink, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.load import LoadTracker, WorkerLoad
from clockwork_svc.domain.model import ClusterLayout, Firing
from clockwork_svc.domain.planning import READ_AHEAD_MS
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.tenancy import NO_LIMITS
from clockwork_svc.worker.dispatcher import Dispatcher, TenantSource
from clockwork_svc.worker.due_queue import DueQueue
from clockwork_svc.worker.firing_observer import FiringObserver
from clockwork_svc.worker.sequencer import OrderingSequencer
from clockwork_svc.worker.shard_scanner import ScanSettings, ShardScanner
from clockwork_svc.worker.tenant_gates import TenantGates, Verdict
from clockwork_svc.worker.upcoming_sends import UpcomingSends

log = logging.getLogger(__name__)

# While dispatch is not allowed, a due firing is looked at again this much later.
_PAUSED_RECHECK_MS = 100


class _NotNow(Exception):
    """Raised while a read-ahead firing waits for its due time: its shard was dropped,
    or dispatch is no longer allowed (the lease deadline is near)."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    scan: ScanSettings = field(default_factory=ScanSettings)
    max_concurrent_deliveries: int = 512
    # The fraction of those one tenant may hold (a hung endpoint ties up no more).
    max_tenant_share: float = 0.5
    # Wait this long for in-flight deliveries on shutdown before abandoning them
    # (an abandoned firing is not marked done, so the next owner delivers it).
    shutdown_grace_s: float = 10.0
    store_retry_delay_s: float = 1.0
    # How long tenant records (signing secrets, limits) are cached: a rotation, a limit
    # change or a pause takes effect within this.
    tenant_cache_s: float = 10.0
    # How often held (sidelined) firings are checked for a resume of their tenant.
    held_check_s: float = 0.5


@dataclass(frozen=True, slots=True)
class Pending:
    """A firing on its way through the worker."""

    firing: Firing
    scanner: ShardScanner
    # Time spent held while its tenant was paused (not counted against relevancy).
    held_ms: int = 0
    # Already holds a rate token (it waited for it).
    reserved: bool = False
    # Released from a pause: drains at the tenant's drain rate.
    draining: bool = False
    # Already holds its ordering key's turn (it was admitted, then put back).
    sequenced: bool = False
    # To be recorded SKIPPED, not sent (overlap SKIP: the previous delivery runs).
    skip: bool = False


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
        tenants: TenantSource | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._layout = layout
        self._settings = settings
        self._metrics = metrics
        self._queue: DueQueue[Pending] = DueQueue(clock.now_ms)
        self._tenants = tenants
        self._gates = TenantGates(
            max(1, math.floor(settings.max_concurrent_deliveries * settings.max_tenant_share))
        )
        self._sequencer: OrderingSequencer[Pending] = OrderingSequencer(store)
        # Per tenant: firings waiting for a concurrency slot; firings held while paused.
        self._blocked: dict[str, collections.deque[Pending]] = {}
        self._held: dict[str, list[tuple[Pending, int]]] = {}
        self._scanners: dict[int, ShardScanner] = {}
        self._scan_tasks: dict[int, asyncio.Task[None]] = {}
        self._deliveries: set[asyncio.Task[None]] = set()
        self._in_flight: dict[int, set[asyncio.Task[None]]] = {}
        self._may_dispatch = may_dispatch
        self._slots = asyncio.Semaphore(settings.max_concurrent_deliveries)
        self._dispatcher = Dispatcher(
            store, sink, clock, FiringObserver(metrics), self.offer, tenants, tracing=tracing
        )
        self._fire_task: asyncio.Task[None] | None = None
        self._held_task: asyncio.Task[None] | None = None
        self._load = LoadTracker(clock.now_ms())
        self._dispatch_paused = False
        # Due times of the firings taken from the queue and not yet sent.
        self._upcoming = UpcomingSends()

    @property
    def owned_shards(self) -> dict[int, int]:
        return {s: sc.epoch for s, sc in self._scanners.items() if sc.active}

    def start(self) -> None:
        self._fire_task = asyncio.create_task(self._fire_loop(), name="worker-fire-loop")
        self._held_task = asyncio.create_task(self._release_held(), name="worker-held-check")
        for task in (self._fire_task, self._held_task):
            task.add_done_callback(_report_crash)

    @property
    def alive(self) -> bool:
        """False once a background loop has died (see `_report_crash`)."""
        return not any(
            task is not None and task.done() for task in (self._fire_task, self._held_task)
        )

    def add_shard(self, shard: int, epoch: int) -> None:
        if shard in self._scanners and self._scanners[shard].active:
            return
        scanner = ShardScanner(
            shard,
            epoch,
            self._store,
            self._clock,
            self._settings.scan,
            self._enqueue,
            self._metrics.fenced.inc,
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
        self._sequencer.forget_shard(shard)
        scanner = self._scanners.pop(shard, None)
        task = self._scan_tasks.pop(shard, None)
        if scanner is not None:
            scanner.active = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._metrics.shards_owned.set(len(self._scanners))

    def load_report(self, worker_id: str, window_s: float) -> WorkerLoad:
        """This worker's load since the previous report (see domain/load.py)."""
        return self._load.report(
            worker_id,
            self._clock.now_ms(),
            shards=len(self.owned_shards),
            queued=self._queue.counter,
            in_flight=len(self._deliveries),
            window_s=window_s,
        )

    def quiet_ms(self) -> int | None:
        """How long from now until this worker next sends a firing, as far as it knows
        (negative: one is late; None: nothing is queued). A firing still in the due
        queue is counted at its due time, not at its read-ahead."""
        sends = [self._upcoming.first()]
        queued = self._queue.first_due()
        if queued is not None:
            sends.append(queued + READ_AHEAD_MS)
        known = [t for t in sends if t is not None]
        return min(known) - self._clock.now_ms() if known else None

    def offer(self, firing: Firing) -> None:
        """A firing this process just wrote: fire it without waiting for a scan."""
        scanner = self._scanners.get(firing.shard)
        if scanner is not None:
            scanner.offer(firing)

    def _enqueue(self, firing: Firing, scanner: ShardScanner) -> None:
        self._push(_dispatch_ms(firing), Pending(firing, scanner))

    def _push(self, due_ms: int, item: Pending) -> None:
        self._queue.push(due_ms, item)
        self._metrics.due_backlog.inc()

    def _share(self) -> float:
        """This worker's share of every tenant's limits."""
        return max(1, len(self.owned_shards)) / self._layout.shard_count

    async def _fire_loop(self) -> None:
        while True:
            batch = collections.deque(await self._queue.pop_due(1024))
            while batch:
                # A parked firing due before the batch's next one may have been put back
                # meanwhile (a delivery answered): it goes first.
                _, item = self._queue.pop_if_before(batch[0][0]) or batch.popleft()
                self._metrics.due_backlog.dec()
                try:
                    await self._dispatch(item)
                except StoreUnavailable as exc:
                    # The ordering block or the tenant could not be read: try again soon.
                    # (Nothing is held yet: re-admitting the same firing is safe.)
                    self._metrics.store_errors.labels("admit").inc()
                    log.warning(
                        "firing %s: store unavailable, will retry: %s", item.firing.firing_id, exc
                    )
                    self._push(self._retry_at(), item)
                except Exception:
                    log.exception("firing %s: admission failed; will retry", item.firing.firing_id)
                    self._push(self._retry_at(), item)

    async def _dispatch(self, item: Pending) -> None:
        if not item.scanner.active:
            # The shard was dropped: its next scanner (here or elsewhere) reads it again.
            # If it was a parked firing released by a finished delivery, that turn
            # passes to the next one (one too many is parked again, harmlessly).
            self._release_blocked(item.firing.tenant)
            return
        if not self._may_dispatch():
            # Ownership in doubt (the lease deadline is near): hold the firing back, do
            # not drop it. Its scanner still counts it as pending and will not read it
            # again, so dropping it here would lose it for as long as the shard stays ours
            # (a late keepalive answer that arrives after all keeps every shard).
            # If the shard is dropped meanwhile, the check above discards it.
            if not self._dispatch_paused:
                self._dispatch_paused = True
                log.warning("dispatch paused: lease deadline near; holding due firings")
            self._push(self._clock.now_ms() + _PAUSED_RECHECK_MS, item)
            return
        if self._dispatch_paused:
            self._dispatch_paused = False
            log.warning("dispatch resumed")
        if planning.sequence_key(item.firing) and not (item.sequenced or item.skip):
            admitted = await self._sequencer.admit(item)
            if admitted is None:
                # Not sent, so neither the tenant's limits nor the key's turn apply.
                item = dataclasses.replace(item, skip=True)
            elif not admitted:
                return  # parked until the key's previous delivery resolves
        if item.skip or await self._admitted(item):
            await self._slots.acquire()
            self._load.dispatched(max(0, self._clock.now_ms() - item.firing.fire_at_ms))
            task = asyncio.create_task(
                self._deliver(item), name=f"fire-{item.firing.firing_id[:12]}"
            )
            self._track(item.firing.shard, task)

    async def _admitted(self, item: Pending) -> bool:
        """Apply the tenant's limits; a firing not admitted now is parked, not dropped."""
        tenant = item.firing.tenant
        limits = await self._tenants.limits(tenant) if self._tenants else NO_LIMITS
        now_ms = self._clock.now_ms()
        # The token is taken for the time the delivery leaves: the due time, for a
        # firing popped READ_AHEAD_MS early. (Taken at the pop, two firings due together
        # got tokens 250 ms apart, yet both left at the due time.)
        sent_ms = max(now_ms, item.firing.fire_at_ms)
        admission = self._gates.admit(
            tenant, limits, self._share(), sent_ms / 1000, item.reserved, item.draining
        )
        if admission.verdict is Verdict.GO:
            return True
        if admission.verdict is Verdict.WAIT:
            delay_ms = int(admission.delay_s * 1000)
            self._push(sent_ms + delay_ms, dataclasses.replace(item, reserved=True))
        elif admission.verdict is Verdict.FULL:
            self._blocked.setdefault(tenant, collections.deque()).append(item)
        else:
            self._held.setdefault(tenant, []).append((item, now_ms))
        return False

    async def _release_held(self) -> None:
        """Move held firings back to the queue once their tenant is resumed."""
        while True:
            await asyncio.sleep(self._settings.held_check_s)
            for tenant in list(self._held):
                try:
                    limits = await self._tenants.limits(tenant) if self._tenants else NO_LIMITS
                except StoreUnavailable as exc:
                    log.warning("tenant %s: store unavailable, still held: %s", tenant, exc)
                    continue
                if limits.paused:
                    continue
                now_ms = self._clock.now_ms()
                for item, since_ms in self._held.pop(tenant):
                    held = item.held_ms + now_ms - since_ms
                    self._push(now_ms, dataclasses.replace(item, held_ms=held, draining=True))

    def _unblock(self, tenant: str) -> None:
        self._gates.finished(tenant)
        self._release_blocked(tenant)

    def _release_blocked(self, tenant: str) -> None:
        """Put the tenant's next parked firing back in the queue. One of a dropped shard
        is discarded on the way: released, it would take the turn a delivery freed
        and start nothing, and the rest could wait for a delivery that never ends."""
        waiting = self._blocked.get(tenant)
        while waiting:
            item = waiting.popleft()
            if item.scanner.active:
                # Back in its place by due time: pushed as of now, it would wait behind
                # every later firing that fell due while it was parked (on a backlog,
                # until the backlog is drained).
                self._push(min(self._clock.now_ms(), _dispatch_ms(item.firing)), item)
                break
        if waiting is not None and not waiting:
            del self._blocked[tenant]

    def _track(self, shard: int, task: asyncio.Task[None]) -> None:
        self._deliveries.add(task)
        in_flight = self._in_flight.setdefault(shard, set())
        in_flight.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._deliveries.discard(t)
            in_flight.discard(t)

        task.add_done_callback(done)

    async def _deliver(self, item: Pending) -> None:
        firing, scanner = item.firing, item.scanner
        # The tenant's turn (its concurrency limit and share of the slots) counts
        # deliveries: it passes on as soon as the delivery returns, while this firing's
        # record and `done` are written (they load the store, not the tenant's target).
        turn_open = not item.skip  # a skipped firing never took a turn (`_admitted`)
        upcoming = True
        self._upcoming.add(firing.fire_at_ms)

        def release_turn() -> None:
            nonlocal turn_open
            if turn_open:
                turn_open = False
                self._unblock(firing.tenant)

        def sent() -> None:
            nonlocal upcoming
            if upcoming:
                upcoming = False
                self._upcoming.remove(firing.fire_at_ms)

        async def until_due() -> None:
            try:
                await self._until_due(item)
            finally:
                sent()

        try:
            outcome = await self._dispatcher.handle(
                firing,
                held_ms=item.held_ms,
                until_due=until_due,
                skip=item.skip,
                delivered=release_turn,
            )
            scanner.finished(firing)
            if planning.sequence_key(firing) and not item.skip:
                for following in self._sequencer.completed(item, outcome):
                    self._push(self._clock.now_ms(), following)
        except _NotNow:
            # Nothing was written. A dropped shard's next owner reads the firing again;
            # otherwise it waits, as a firing popped while dispatch is paused does.
            if scanner.active:
                self._push(
                    self._clock.now_ms() + _PAUSED_RECHECK_MS,
                    dataclasses.replace(item, reserved=True, sequenced=True),
                )
        except StoreUnavailable as exc:
            # Not done: try again shortly; the cursor stays behind this firing meanwhile.
            self._metrics.store_errors.labels("dispatch").inc()
            log.warning("firing %s: store unavailable, will retry: %s", firing.firing_id, exc)
            self._retry_later(item)
        except Exception:
            log.exception("firing %s failed unexpectedly; will retry", firing.firing_id)
            self._retry_later(item)
        finally:
            sent()
            self._slots.release()
            if item.skip:
                self._release_blocked(firing.tenant)
            else:
                release_turn()

    async def _until_due(self, item: Pending) -> None:
        """Wait for the firing's due time (its schedule was read ahead), then check
        again what `_dispatch` checked: the shard is still ours to deliver from."""
        # Twice at most: cluster time may be nudged back during the first sleep.
        for _ in range(2):
            wait_ms = item.firing.fire_at_ms - self._clock.now_ms()
            if wait_ms <= 0:
                break
            await asyncio.sleep(wait_ms / 1000)
        if not item.scanner.active or not self._may_dispatch():
            raise _NotNow

    def _retry_at(self) -> int:
        return self._clock.now_ms() + int(self._settings.store_retry_delay_s * 1000)

    def _retry_later(self, item: Pending) -> None:
        # It keeps its ordering key's turn: admitted again, it would queue behind the
        # key's other waiting firings, which wait for it (a deadlock).
        self._push(self._retry_at(), dataclasses.replace(item, reserved=True, sequenced=True))

    async def stop(self) -> None:
        """Stop scanning, let in-flight deliveries finish (bounded), release shards."""
        await self.drop_all_shards()
        for background in (self._fire_task, self._held_task):
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
        if self._deliveries:
            _, still_running = await asyncio.wait(
                set(self._deliveries), timeout=self._settings.shutdown_grace_s
            )
            for task in still_running:
                task.cancel()
            if still_running:
                await asyncio.wait(still_running)
                log.warning("abandoned %d in-flight deliveries at shutdown", len(still_running))


def _dispatch_ms(firing: Firing) -> int:
    """When a firing leaves the due queue: READ_AHEAD_MS early, its schedule is read
    ahead, then it waits for its due time (`_until_due`), so the read's latency is not
    part of the firing lag."""
    return firing.fire_at_ms - READ_AHEAD_MS


def _report_crash(task: asyncio.Task[None]) -> None:
    """A background loop must never end quietly: a worker that scans but does not fire
    would look healthy. Log loudly; `Worker.alive` turns false, failing /healthz."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("%s ended unexpectedly", task.get_name(), exc_info=task.exception())
