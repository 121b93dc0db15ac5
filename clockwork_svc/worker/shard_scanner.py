"""Scans one owned shard for due firings and moves its cursor forward.

Reading model (see docs/architecture.md, "Firing path"):
- a forward scan reads [scanned_to, now + lookahead) every poll;
- a sweep re-reads [now - settle, scanned_to) every sweep interval, catching rows
  whose write finished after the forward scan passed their due time (writers never
  write a firing due before their own "now", so `settle` bounds that window); on a
  sweep poll the two are one read of [now - settle, now + lookahead) that fetches
  only keys and `done` flags, then in full only the rows not seen yet;
- the cursor advances to the oldest unfinished firing, or now - settle, whichever
  is earlier, and is persisted with the owner's epoch; a rejected advance means
  another worker owns the shard, and this scanner stops at once;
- a firing written twice (a second row under the same id: planning.late_rewrites) is
  admitted once; once it has finished, every other row of it the scanner reads is
  marked done, so that a next owner starting from the cursor does not deliver it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from clockwork_svc.abc import Clock, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import Firing
from clockwork_svc.errors import StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScanSettings:
    lookahead_ms: int = 2_000
    settle_ms: int = planning.SETTLE_MS
    # With both at 1 s, every poll is a sweep: one read of the keys of
    # [now - settle, now + lookahead), and of the rows not seen yet in full. Each firing
    # is read in full once, 1-2 s before it is due (a late write within a second of its
    # write), and as a key about five times; at rest, one request per shard per second.
    poll_interval_ms: int = 1_000
    sweep_interval_ms: int = 1_000
    # A cursor write is a compare-and-set (Paxos) on the epoch: every 5 s per shard,
    # not every second. A takeover re-reads at most that much more (done rows skipped).
    cursor_interval_ms: int = 5_000
    # While the cursor cannot move (nothing to advance past), still confirm the epoch
    # this often, so a fenced owner drops the shard even without progress to write.
    fence_check_interval_ms: int = 5_000
    page_size: int = 500
    max_pending: int = 20_000


def _phase(shard: int) -> float:
    """A fraction in [0, 1) that spreads consecutive shards evenly (golden ratio)."""
    return (shard * 0.6180339887498949) % 1.0


class Fenced(Exception):
    """A newer owner holds the shard."""


@dataclass
class _Finished:
    """A finished firing, kept until the cursor passes its latest row."""

    row: Firing  # the row that was dispatched (and marked done by the dispatcher)
    marked: set[int] = field(default_factory=set)  # its other rows, marked done here

    @property
    def latest_ms(self) -> int:
        return max((self.row.fire_at_ms, *self.marked))


class ShardScanner:
    def __init__(
        self,
        shard: int,
        epoch: int,
        store: Store,
        clock: Clock,
        settings: ScanSettings,
        enqueue: Callable[[Firing, ShardScanner], None],
        on_fenced: Callable[[], None] = lambda: None,
    ) -> None:
        self.shard = shard
        self.epoch = epoch
        self.active = True
        self._store = store
        self._clock = clock
        self._settings = settings
        self._enqueue = enqueue
        self._on_fenced = on_fenced
        self._pending: dict[str, int] = {}  # unfinished firing id -> fire_at
        self._finished: dict[str, _Finished] = {}
        # In flight, and also seen at other times (written again: late_rewrites).
        self._other_rows: dict[str, set[int]] = {}
        self._marking: set[asyncio.Task[None]] = set()
        self._position = 0
        self._scanned_to = 0
        self._last_write_m = 0.0
        self._wake = asyncio.Event()
        self._advancing: asyncio.Task[None] | None = None

    def offer(self, firing: Firing) -> None:
        """Add a firing known from elsewhere (written by this process); deduplicated."""
        if self.active and firing.fire_at_ms >= self._position:
            self._admit(firing)

    def finished(self, firing: Firing) -> None:
        """`firing` is done (the dispatcher marked its row): its other rows seen so far
        are marked done too."""
        fid = firing.firing_id
        if self._pending.pop(fid, None) is None:
            return
        done = self._finished[fid] = _Finished(firing)
        for fire_at_ms in self._other_rows.pop(fid, set()):
            self._mark_other_row(done, fire_at_ms)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Scan until stopped or fenced. Store outages are retried, not fatal."""
        try:
            await self._acquire()
            # The first read at once (a takeover has due firings to find); after it each
            # shard keeps its own phase within the poll and cursor intervals: shards
            # acquired together would otherwise read (and compare-and-set) in one burst
            # every interval, and a firing due during the burst waits for it.
            phase = _phase(self.shard)
            started = self._clock.monotonic()
            last_sweep = started - self._settings.sweep_interval_ms / 1000
            last_advance = started - phase * self._settings.cursor_interval_ms / 1000
            phase_delay_s = phase * self._settings.poll_interval_ms / 1000
            while self.active:
                now_m = self._clock.monotonic()
                try:
                    self._check_cursor()
                    if now_m - last_sweep >= self._settings.sweep_interval_ms / 1000:
                        await self._sweep_and_scan()
                        last_sweep = now_m
                    else:
                        await self._forward_scan()
                    if (
                        self._advancing is None
                        and now_m - last_advance >= self._settings.cursor_interval_ms / 1000
                    ):
                        # Beside the scan, not in its way: a compare-and-set held up
                        # (a coordinator its clients cannot reach answers only at the
                        # request timeout) must not hold up the shard's firings.
                        self._advancing = asyncio.create_task(
                            self._advance_cursor(), name=f"cursor-{self.shard}"
                        )
                        last_advance = now_m
                except StoreUnavailable as exc:
                    log.warning("shard %d: store unavailable, retrying: %s", self.shard, exc)
                    await asyncio.sleep(1.0)
                except Fenced:
                    raise
                except Exception:
                    # Never end quietly: an unscanned shard that stays owned is a stall.
                    log.exception("shard %d: scan failed unexpectedly, retrying", self.shard)
                    await asyncio.sleep(1.0)
                await self._idle()
                if phase_delay_s:
                    await asyncio.sleep(phase_delay_s)
                    phase_delay_s = 0.0
        except Fenced:
            log.warning("shard %d: fenced off by a newer owner (epoch %d)", self.shard, self.epoch)
            self._on_fenced()
        finally:
            self.active = False
            if self._advancing is not None:
                self._advancing.cancel()

    def _check_cursor(self) -> None:
        """Take the outcome of a finished cursor write: Fenced is raised; a store error
        is logged (the next write comes at the next cursor interval)."""
        if self._advancing is None or not self._advancing.done():
            return
        advancing, self._advancing = self._advancing, None
        if advancing.cancelled():
            return
        exc = advancing.exception()
        if isinstance(exc, StoreUnavailable):
            log.warning("shard %d: cursor not written, retrying later: %s", self.shard, exc)
        elif exc is not None:
            raise exc

    async def _acquire(self) -> None:
        while True:
            try:
                cursor = await self._store.acquire_shard(self.shard, self.epoch)
                break
            except StoreUnavailable as exc:
                log.warning("shard %d: cannot acquire yet: %s", self.shard, exc)
                await asyncio.sleep(1.0)
        if cursor is None:
            raise Fenced
        self._position = self._scanned_to = cursor.position_ms

    async def _idle(self) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), self._settings.poll_interval_ms / 1000)
        except TimeoutError:
            pass

    async def _forward_scan(self) -> None:
        upper = self._clock.now_ms() + self._settings.lookahead_ms
        self._scanned_to = await self._read(self._scanned_to, upper)

    async def _sweep_and_scan(self) -> None:
        """The sweep and the forward scan as one read of [now - settle, now + lookahead),
        of keys and `done` flags only: a row this owner has seen (in flight or finished)
        is not read again; the rows it has not seen, new ones ahead and late writes
        behind, are read in full."""
        now = self._clock.now_ms()
        lower = min(max(self._position, now - self._settings.settle_ms), self._scanned_to)
        reached = await self._sweep(lower, now + self._settings.lookahead_ms)
        self._scanned_to = max(self._scanned_to, reached)

    async def _sweep(self, lower_ms: int, upper_ms: int) -> int:
        """Returns how far it got (less than upper under backpressure)."""
        start = (lower_ms, "")
        while self.active:
            if len(self._pending) >= self._settings.max_pending:
                return start[0]
            keys = await self._store.scan_firing_keys(
                self.shard, start, upper_ms, self._settings.page_size
            )
            unseen = [k for k in keys if not k.done and not self._known(k.firing_id, k.fire_at_ms)]
            if unseen:
                # One full read from the first unseen row to the last (rows between
                # them that are known are skipped by _admit).
                end_ms = unseen[-1].fire_at_ms + 1
                reached = await self._read(unseen[0].fire_at_ms, end_ms)
                if reached < end_ms:
                    return reached
            if len(keys) < self._settings.page_size:
                return upper_ms
            start = keys[-1].sort_key
        return upper_ms

    async def _read(self, lower_ms: int, upper_ms: int) -> int:
        """Read [lower, upper); returns how far it got (less than upper under backpressure)."""
        start = (lower_ms, "")
        while self.active:
            if len(self._pending) >= self._settings.max_pending:
                return start[0]
            page = await self._store.scan_firings(
                self.shard, start, upper_ms, self._settings.page_size
            )
            for firing in page:
                if not firing.done:
                    self._admit(firing)
            if len(page) < self._settings.page_size:
                return upper_ms
            start = page[-1].sort_key
        return upper_ms

    def _known(self, firing_id: str, fire_at_ms: int) -> bool:
        """Whether this owner holds the firing already, in flight or finished, for a
        row not marked done. Another row of it (the same firing written again:
        planning.late_rewrites) is marked done once the firing has finished, and a
        later one keeps it known until the cursor passes that row."""
        pending_at = self._pending.get(firing_id)
        if pending_at is not None:
            if fire_at_ms != pending_at:
                self._other_rows.setdefault(firing_id, set()).add(fire_at_ms)
            return True
        done = self._finished.get(firing_id)
        if done is None:
            return False
        if fire_at_ms != done.row.fire_at_ms:
            self._mark_other_row(done, fire_at_ms)
        return True

    def _mark_other_row(self, done: _Finished, fire_at_ms: int) -> None:
        """Mark done another row of a finished firing, once (in the background: a row
        left unmarked costs at most a duplicate after a takeover, never a loss)."""
        if fire_at_ms in done.marked:
            return
        done.marked.add(fire_at_ms)
        row = dataclasses.replace(done.row, fire_at_ms=fire_at_ms)
        task = asyncio.create_task(self._store.mark_done(row), name=f"mark-done-{self.shard}")
        self._marking.add(task)
        task.add_done_callback(self._marked)

    def _marked(self, task: asyncio.Task[None]) -> None:
        self._marking.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning(
                "shard %d: another row of a finished firing not marked done: %r", self.shard, exc
            )

    def _admit(self, firing: Firing) -> None:
        fid = firing.firing_id
        if self._known(fid, firing.fire_at_ms):
            return
        self._pending[fid] = firing.fire_at_ms
        self._enqueue(firing, self)

    async def _advance_cursor(self) -> None:
        candidates = [self._clock.now_ms() - self._settings.settle_ms, self._scanned_to]
        if self._pending:
            candidates.append(min(self._pending.values()))
        target = min(candidates)
        now_m = self._clock.monotonic()
        if target <= self._position:
            if now_m - self._last_write_m < self._settings.fence_check_interval_ms / 1000:
                return
            target = self._position  # an epoch check that moves nothing
        if not await self._store.advance_cursor(self.shard, target, self.epoch):
            raise Fenced
        self._last_write_m = now_m
        self._position = target
        self._finished = {k: v for k, v in self._finished.items() if v.latest_ms >= target}
