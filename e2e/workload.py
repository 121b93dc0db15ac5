"""A seeded workload: one-shot, interval and cron schedules with unique keys, whose
expected firings up to an end time are computed with clockwork_svc.domain.triggers.

    workload = Workload(seed=7, target=sink.url)
    planned = workload.generate(count=200, start_ms=t0 + 3_000, end_ms=t0 + 20_000)
    await workload.create(client, planned)          # retries with the same keys
    expected = workload.expectations(end_ms)        # what the checker judges against

Every trigger carries explicit start and end times, so the occurrences do not depend
on when the server received the create. What does depend on it is recorded: a create
is acknowledged somewhere between its first send and its acknowledgement, and a
recurring schedule arms its first occurrence at or after the server's "now", so the
occurrences due inside that interval are *optional* (neither required nor forbidden);
the ones due after the acknowledgement are required. A one-shot is always required
(one due in the past fires at once). Likewise, a cancelled schedule's occurrences due
after the cancel was acknowledged are forbidden, and the ones due before it are
optional, however long before: an occurrence still pending when the cancel lands (a
backlog behind a failed worker, say) is superseded by it, not delivered late.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain import identity, triggers
from clockwork_svc.domain.model import Created
from clockwork_svc.domain.spec import HttpTarget, RetryPolicy, ScheduleSpec
from clockwork_svc.errors import Cancelled, ClockworkError, Internal, Unavailable

Kind = Literal["once", "interval", "cron"]
KINDS: tuple[Kind, ...] = ("once", "interval", "cron")
INTERVALS_MS = (2_000, 3_000, 5_000)
CRON_EXPRESSIONS = ("* * * * *", "*/2 * * * *")
BATCH = 200
# Errors worth retrying a create after (the api restarting, a store outage): UNAVAILABLE
# and DEADLINE_EXCEEDED (Unavailable), INTERNAL and UNKNOWN (Internal), CANCELLED.
_RETRYABLE = (Unavailable, Internal, Cancelled)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Planned:
    key: str
    kind: Kind
    spec: ScheduleSpec

    def occurrences(self, until_ms: int) -> list[int]:
        """Occurrence times before `until_ms` (exclusive), from the trigger itself."""
        trigger = self.spec.trigger
        times: list[int] = []
        prev: int | None = None
        seq = 0
        while True:
            at = triggers.occurrence(trigger, seq, prev)
            if at is None or at >= until_ms:
                return times
            times.append(at)
            prev, seq = at, seq + 1


@dataclass(frozen=True)
class Acked:
    """A create or cancel the server acknowledged: first sent and acknowledged (ms)."""

    sent_ms: int
    acked_ms: int


@dataclass(frozen=True)
class ExpectedFiring:
    delivery_id: str
    key: str
    kind: Kind
    occurrence_ms: int
    due_ms: int
    required: bool
    """False: may or may not be delivered (armed around the create, or cancelled)."""


@dataclass
class Expectations:
    """What the checker judges against."""

    firings: dict[str, ExpectedFiring] = field(default_factory=dict)
    forbidden: dict[str, str] = field(default_factory=dict)
    """Delivery id -> why it must not be delivered (e.g. cancelled before it was due)."""
    series: dict[str, list[str]] = field(default_factory=dict)
    """Recurring key -> its delivery ids in occurrence order (the misfire rule)."""
    end_ms: int = 0

    @property
    def required(self) -> dict[str, int]:
        """Delivery id -> due time, of the firings that must be accounted for."""
        return {d: f.due_ms for d, f in self.firings.items() if f.required}

    def required_before(self, until_ms: int) -> None:
        """Firings due at or after `until_ms` may or may not be delivered: a run that
        judges only its earlier part still knows the later ones (not unexpected)."""
        for delivery, firing in self.firings.items():
            if firing.required and firing.due_ms >= until_ms:
                self.firings[delivery] = replace(firing, required=False)

    def merge(self, other: Expectations) -> None:
        self.firings.update(other.firings)
        self.forbidden.update(other.forbidden)
        self.series.update(other.series)
        self.end_ms = max(self.end_ms, other.end_ms)


class BatchCreate:
    """One `create_many` batch, sent until every entry is acknowledged, as a careful
    client would: the whole call is retried after a retryable error, and the
    entries answered UNAVAILABLE (a store timeout) are sent again with the same keys
    (creates are idempotent per key). Any other answer raises, and so does the
    deadline (`timeout_s` from the first send)."""

    def __init__(
        self,
        client: ClockworkClient,
        entries: Sequence[tuple[str, ScheduleSpec]],
        timeout_s: float,
    ) -> None:
        self._client = client
        self._entries = list(entries)
        self._timeout_s = timeout_s
        self.retried = 0
        """Calls that failed (wholly or for some entries) and were sent again."""

    async def acknowledgements(self) -> AsyncIterator[tuple[str, str, int]]:
        """(key, schedule id, acknowledged at ms) for each entry, as replies arrive."""
        pending = self._entries
        deadline = time.monotonic() + self._timeout_s
        while pending:
            try:
                results = await self._client.create_many(pending)
            except ClockworkError as exc:
                if not isinstance(exc, _RETRYABLE) or time.monotonic() > deadline:
                    raise
                self.retried += 1
                await asyncio.sleep(0.3)
                continue
            acked = now_ms()
            failed = []
            for (key, spec), result in zip(pending, results, strict=True):
                if isinstance(result, Created):
                    yield key, result.schedule.id, acked
                elif isinstance(result, Unavailable):
                    failed.append((key, spec))
                else:
                    raise AssertionError(f"create {key}: {result}")
            if failed:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(failed)} creates still unavailable")
                self.retried += 1
                await asyncio.sleep(0.3)
            pending = failed


class Workload:
    def __init__(
        self,
        seed: int,
        target: str,
        prefix: str = "w",
        retry: RetryPolicy | None = None,
        mix: tuple[float, float, float] = (0.75, 0.2, 0.05),
        timeout_ms: int = 0,
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.target = target.rstrip("/")
        self.prefix = prefix
        self.retry = retry or RetryPolicy()
        self.mix = mix
        self.timeout_ms = timeout_ms
        self.planned: dict[str, Planned] = {}
        self.created: dict[str, Acked] = {}
        self.schedule_ids: dict[str, str] = {}
        self.cancelled: dict[str, Acked] = {}
        self._n = 0

    # --- generation ------------------------------------------------------------------

    def generate(
        self, count: int, start_ms: int, end_ms: int, kinds: Sequence[Kind] | None = None
    ) -> list[Planned]:
        """`count` schedules whose occurrences lie in [start_ms, end_ms)."""
        out = []
        for _ in range(count):
            kind = self.rng.choice(kinds) if kinds else self._kind()
            out.append(self.make(kind, start_ms, end_ms))
        return out

    def make(self, kind: Kind, start_ms: int, end_ms: int) -> Planned:
        self._n += 1
        key = f"{self.prefix}-{self.seed}-{self._n}-{kind}"
        trigger: triggers.Trigger
        if kind == "once":
            trigger = triggers.OnceTrigger(self.rng.randrange(start_ms, max(start_ms + 1, end_ms)))
        elif kind == "interval":
            every = self.rng.choice(INTERVALS_MS)
            # The first occurrence inside the window, even when it is shorter than `every`.
            first = start_ms + self.rng.randrange(max(1, min(every, end_ms - start_ms)))
            trigger = triggers.IntervalTrigger(every, start_ms=first, end_ms=end_ms)
        else:
            expression = self.rng.choice(CRON_EXPRESSIONS)
            trigger = triggers.CronTrigger(expression, "UTC", start_ms=start_ms, end_ms=end_ms)
        spec = ScheduleSpec(
            trigger,
            HttpTarget(f"{self.target}/{kind}/{key}", timeout_ms=self.timeout_ms),
            retry=self.retry,
        )
        planned = Planned(key, kind, spec)
        self.planned[key] = planned
        return planned

    def _kind(self) -> Kind:
        return self.rng.choices(KINDS, weights=self.mix)[0]

    # --- against the API ----------------------------------------------------------------

    async def create(
        self,
        client: ClockworkClient,
        items: Sequence[Planned],
        timeout_s: float = 90.0,
        batch: int = BATCH,
    ) -> int:
        """Create in batches, retrying failed entries with the same keys until every one
        is acknowledged; returns how many calls failed and were retried."""
        retried = 0
        for chunk in range(0, len(items), batch):
            part = items[chunk : chunk + batch]
            sent = now_ms()
            creating = BatchCreate(client, [(p.key, p.spec) for p in part], timeout_s)
            async for key, schedule_id, acked in creating.acknowledgements():
                self.acknowledge(key, schedule_id, sent, acked)
            retried += creating.retried
        return retried

    def acknowledge(self, key: str, schedule_id: str, sent_ms: int, acked_ms: int) -> None:
        """Record a create of a planned schedule the server acknowledged (made here or
        by the caller's own calls)."""
        self.created[key] = Acked(sent_ms, acked_ms)
        self.schedule_ids[key] = schedule_id

    async def cancel(self, client: ClockworkClient, keys: Sequence[str]) -> None:
        for key in keys:
            sent = now_ms()
            await client.cancel(key)
            self.cancelled[key] = Acked(sent, now_ms())

    # --- what should happen ----------------------------------------------------------------

    def expectations(self, end_ms: int) -> Expectations:
        """The firings of every acknowledged schedule due before `end_ms`."""
        out = Expectations(end_ms=end_ms)
        for key, acked in self.created.items():
            planned = self.planned[key]
            schedule_id = self.schedule_ids[key]
            cancel = self.cancelled.get(key)
            ids = []
            for at in planned.occurrences(end_ms):
                delivery = identity.delivery_id(schedule_id, at)
                if cancel is not None and at > cancel.acked_ms:
                    out.forbidden[delivery] = f"{key} cancelled before it was due"
                    continue
                # A one-shot fires even if its time passed before the create landed.
                required = planned.kind == "once" or at > acked.acked_ms
                if cancel is not None:
                    # Delivered if its worker got to it before the cancel landed; if it
                    # was still pending (overdue after a takeover), the cancel wins.
                    required = False
                out.firings[delivery] = ExpectedFiring(
                    delivery, key, planned.kind, at, at, required
                )
                ids.append(delivery)
            if planned.kind != "once":
                out.series[key] = ids
        return out
