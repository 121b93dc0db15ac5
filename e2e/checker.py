"""The delivery checker: compares what should have been delivered with what the sink
got and what the API says happened.

- **lost**: acknowledged and due before the end (required, see e2e/workload.py), but
  neither delivered (answered 2xx), nor dead-lettered (ListDeadLetters), nor expired
  (an EXPIRED execution in ListExecutions), nor skipped by the misfire policy;
- **duplicated**: one delivery id answered 2xx more than once (at-least-once allows it
  under faults; without faults there must be none);
- **unexpected**: a request for a delivery id that was cancelled before it was due, or
  that no acknowledged schedule has (never created, or invented);
- **late**: lag = first arrival at the sink (any answer) minus the due time: its
  distribution, its maximum, and the same per fault window (the firings due inside
  each nemesis window).

**Misfire.** A recurring schedule does not replay missed occurrences: with
FIRE_LATEST, the worker that dispatches occurrence `o` at time `s` writes as the next
one the latest occurrence at or before `s` (if the one after `o` is already past).
The occurrences strictly between `o` and that one are skipped by design and are
counted as `skipped`, not lost. `s` is the first attempt's (latest recorded) execution
start (from ListExecutions), or else the first arrival of `o` at the sink, which is
later. An arrival earlier than the recorded start comes from a worker that died before
recording its attempt; the re-dispatch's plan is the one that stands.

`check(expected_due, received)` is the simple form (one-shots, no API): every
expected id must arrive.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain.model import Outcome
from e2e.workload import Expectations


class Arrival(Protocol):
    """What the checker needs of one request the sink received."""

    @property
    def delivery_id(self) -> str: ...

    @property
    def received_ms(self) -> int: ...


def _ok(arrival: Arrival) -> bool:
    """Whether the sink answered 2xx (sinks that do not record a status always do)."""
    status = getattr(arrival, "status", 200)
    return isinstance(status, int) and 200 <= status < 300


def percentile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


# --- the simple form -------------------------------------------------------------------


@dataclass
class CheckResult:
    expected: int
    received: int
    lost: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    lag_ms: list[int] = field(default_factory=list)

    @property
    def max_lag_ms(self) -> int:
        return max(self.lag_ms, default=0)

    def percentile_lag_ms(self, q: float) -> int:
        return percentile(self.lag_ms, q)

    def summary(self) -> str:
        return (
            f"expected={self.expected} received={self.received} lost={len(self.lost)} "
            f"duplicated={sum(n - 1 for n in self.duplicated.values())} "
            f"unexpected={len(self.unexpected)} lag_p50={self.percentile_lag_ms(0.5)}ms "
            f"lag_p99={self.percentile_lag_ms(0.99)}ms lag_max={self.max_lag_ms}ms"
        )


def check(expected_due: Mapping[str, int], received: Sequence[Arrival]) -> CheckResult:
    """`expected_due` maps delivery id -> due time (ms); every one must be answered 2xx."""
    ok_counts = Counter(r.delivery_id for r in received if _ok(r))
    first_seen: dict[str, int] = {}
    for r in received:
        first_seen.setdefault(r.delivery_id, r.received_ms)
    return CheckResult(
        expected=len(expected_due),
        received=len(received),
        lost=sorted(d for d in expected_due if d not in ok_counts),
        duplicated={d: n for d, n in ok_counts.items() if n > 1},
        unexpected=sorted(d for d in first_seen if d not in expected_due),
        lag_ms=[first_seen[d] - due for d, due in expected_due.items() if d in first_seen],
    )


# --- the full form -----------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A nemesis window: the fault was active in [start_ms, end_ms)."""

    name: str
    start_ms: int
    end_ms: int


@dataclass
class Outcomes:
    """What the API reports for the firings that did not arrive."""

    dead_lettered: set[str] = field(default_factory=set)
    expired: set[str] = field(default_factory=set)
    started_ms: dict[str, int] = field(default_factory=dict)
    """Delivery id -> latest start of a first attempt (ListExecutions): when a worker
    dies after dispatching, the next owner dispatches again and its plan is the one
    that stands."""


@dataclass
class WindowFigures:
    name: str
    start_ms: int
    end_ms: int
    due: int
    delivered: int
    lost: int
    lag_p50_ms: int
    lag_p99_ms: int
    lag_max_ms: int


@dataclass
class Report:
    expected: int
    """Required firings (acknowledged, due before the end)."""
    delivered: int
    dead_lettered: int
    expired: int
    skipped: int
    optional_delivered: int
    requests: int
    lost: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    lag_ms: list[int] = field(default_factory=list)
    windows: list[WindowFigures] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        """Extra 2xx answers beyond the first, over all delivery ids."""
        return sum(n - 1 for n in self.duplicated.values())

    def figures(self) -> dict[str, Any]:
        """The headline numbers (what tests print and docs/reliability.md tabulates)."""
        return {
            "expected": self.expected,
            "delivered": self.delivered,
            "dead_lettered": self.dead_lettered,
            "expired": self.expired,
            "skipped_misfire": self.skipped,
            "optional_delivered": self.optional_delivered,
            "requests": self.requests,
            "lost": len(self.lost),
            "duplicated": self.duplicates,
            "unexpected": len(self.unexpected),
            "lag_p50_ms": percentile(self.lag_ms, 0.5),
            "lag_p99_ms": percentile(self.lag_ms, 0.99),
            "lag_max_ms": max(self.lag_ms, default=0),
        }

    def to_json(self) -> str:
        body = {
            **self.figures(),
            "windows": [asdict(w) for w in self.windows],
            "lost_ids": self.lost[:50],
            "duplicated_ids": dict(list(self.duplicated.items())[:50]),
            "unexpected_ids": self.unexpected[:50],
        }
        return json.dumps(body, indent=1, sort_keys=False)

    def summary(self) -> str:
        f = self.figures()
        return (
            f"expected={f['expected']} delivered={f['delivered']} "
            f"dead_lettered={f['dead_lettered']} expired={f['expired']} "
            f"skipped={f['skipped_misfire']} lost={f['lost']} duplicated={f['duplicated']} "
            f"unexpected={f['unexpected']} lag p50/p99/max="
            f"{f['lag_p50_ms']}/{f['lag_p99_ms']}/{f['lag_max_ms']} ms"
        )

    def table(self) -> str:
        """A plain-text table: the headline figures, then one row per fault window."""
        lines = [f"{k:<20} {v}" for k, v in self.figures().items()]
        if self.windows:
            t0 = min(w.start_ms for w in self.windows)
            lines.append("")
            lines.append(
                f"{'window':<22}{'from s':>8}{'to s':>8}{'due':>6}{'deliv':>7}{'lost':>6}"
                f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
            )
            for w in self.windows:
                lines.append(
                    f"{w.name:<22}{(w.start_ms - t0) / 1000:>8.1f}{(w.end_ms - t0) / 1000:>8.1f}"
                    f"{w.due:>6}{w.delivered:>7}{w.lost:>6}{w.lag_p50_ms:>8}{w.lag_p99_ms:>8}"
                    f"{w.lag_max_ms:>8}"
                )
        return "\n".join(lines)


def judge(
    expectations: Expectations,
    received: Sequence[Arrival],
    outcomes: Outcomes | None = None,
    windows: Sequence[Window] = (),
) -> Report:
    outcomes = outcomes or Outcomes()
    firings = expectations.firings
    ok_counts = Counter(r.delivery_id for r in received if _ok(r))
    first_seen: dict[str, int] = {}
    for r in received:
        first_seen.setdefault(r.delivery_id, r.received_ms)
    skipped = _skipped_by_misfire(expectations, first_seen, outcomes, ok_counts)
    required = [f for f in firings.values() if f.required]
    delivered = {f.delivery_id for f in required if f.delivery_id in ok_counts}
    dead = {
        f.delivery_id
        for f in required
        if f.delivery_id not in delivered and f.delivery_id in outcomes.dead_lettered
    }
    delivered_or_dead = delivered | dead
    expired = {
        f.delivery_id
        for f in required
        if f.delivery_id not in delivered_or_dead and f.delivery_id in outcomes.expired
    }
    accounted = delivered_or_dead | expired
    skip = {f.delivery_id for f in required if f.delivery_id not in accounted} & skipped
    accounted |= skip
    lost = sorted(f.delivery_id for f in required if f.delivery_id not in accounted)
    unexpected = sorted(d for d in first_seen if d in expectations.forbidden or d not in firings)
    lag = {d: first_seen[d] - f.due_ms for d, f in firings.items() if d in first_seen}
    lost_set = set(lost)
    figures = []
    for w in windows:
        due = [f for f in required if w.start_ms <= f.due_ms < w.end_ms]
        lags = [lag[f.delivery_id] for f in due if f.delivery_id in lag]
        figures.append(
            WindowFigures(
                w.name,
                w.start_ms,
                w.end_ms,
                len(due),
                sum(1 for f in due if f.delivery_id in delivered),
                sum(1 for f in due if f.delivery_id in lost_set),
                percentile(lags, 0.5),
                percentile(lags, 0.99),
                max(lags, default=0),
            )
        )
    return Report(
        expected=len(required),
        delivered=len(delivered),
        dead_lettered=len(dead),
        expired=len(expired),
        skipped=len(skip),
        optional_delivered=sum(1 for d, f in firings.items() if not f.required and d in ok_counts),
        requests=len(received),
        lost=lost,
        duplicated={d: n for d, n in ok_counts.items() if n > 1},
        unexpected=unexpected,
        lag_ms=sorted(lag.values()),
        windows=figures,
    )


def _skipped_by_misfire(
    expectations: Expectations,
    first_seen: Mapping[str, int],
    outcomes: Outcomes,
    ok_counts: Mapping[str, int],
) -> set[str]:
    """Occurrences that FIRE_LATEST legitimately skipped (see the module docstring)."""
    skipped: set[str] = set()
    firings = expectations.firings
    for ids in expectations.series.values():
        times = [firings[d].occurrence_ms for d in ids]
        for i, d in enumerate(ids):
            # The recorded dispatch governs when there is one: an earlier arrival can come
            # from a worker that died before recording, whose plan the re-dispatch
            # replaced. Without a record, the first arrival (later than its dispatch).
            dispatched = outcomes.started_ms.get(d) or first_seen.get(d)
            if not dispatched:
                continue  # never dispatched: it wrote no next occurrence
            # The occurrence the dispatch of `d` armed: the latest at or before it, if
            # the next one was already past; everything strictly between is skipped.
            last = bisect.bisect_right(times, dispatched) - 1  # times ascend
            if last <= i:
                continue
            skipped.update(ids[i + 1 : last])
    return skipped - set(ok_counts)


# --- asking the API -------------------------------------------------------------------------


async def collect_outcomes(
    client: ClockworkClient,
    expectations: Expectations,
    received: Sequence[Arrival],
    since_ms: int | None = None,
) -> Outcomes:
    """Dead letters (ListDeadLetters since `since_ms`) and, for every schedule with a
    required firing that never got a 2xx, its executions (ListExecutions): EXPIRED
    outcomes and first-attempt start times (for the misfire rule)."""
    outcomes = Outcomes()
    ok = {r.delivery_id for r in received if _ok(r)}
    firings = expectations.firings
    if since_ms is None:
        since_ms = min((f.due_ms for f in firings.values()), default=_now_ms()) - 3_600_000
    window = DeadLetterRange(since_ms=since_ms, until_ms=_now_ms() + 60_000)
    token = ""
    while True:
        page = await client.dead_letters(window, page_size=1000, page_token=token)
        outcomes.dead_lettered.update(d.delivery_id for d in page.items)
        token = page.next_page_token
        if not token:
            break
    keys = sorted({f.key for f in firings.values() if f.required and f.delivery_id not in ok})
    for key in keys:
        token = ""
        while True:
            reply = await client.executions(key, page_size=1000, page_token=token)
            for e in reply.items:
                if e.outcome is Outcome.EXPIRED:
                    outcomes.expired.add(e.delivery_id)
                if e.attempt == 1:
                    started = e.started_ms
                    known = outcomes.started_ms.get(e.delivery_id)
                    outcomes.started_ms[e.delivery_id] = max(started, known or started)
            token = reply.next_page_token
            if not token:
                break
    return outcomes


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
