"""When a schedule fires: one-shot, fixed-interval and cron triggers.

Pure arithmetic: no storage, and no clock is read (the caller passes every "now").
At the interface every time is an integer count of milliseconds since the Unix
epoch (UTC). Time-zone rules come from the IANA database through `zoneinfo`
(the pinned `tzdata` package, or the system's copy if it has one).

Occurrences and `seq`
---------------------
A trigger defines occurrence times that strictly increase. `seq` numbers them from 0
(the first at or after the trigger's start):

* `occurrence(trigger, seq, prev_ms)` gives occurrence `seq`, given the time of
  occurrence `seq - 1` (`None` for `seq == 0`), or `None` once the trigger is
  exhausted: `count` reached, `end_ms` reached (exclusive), a one-shot already
  fired, or past 9999-12-31.
* `first_at_or_after(trigger, now_ms)` gives `(seq, time)` of the first occurrence
  with `time >= now_ms` (on create, resume, and "skip to next" after a misfire).

For interval triggers, seq is exact and computed in O(1). For cron triggers, seq is
exact (counted from `start_ms`) only when `count` is set, because only then does it
decide anything; counting means iterating, so cron `count` is limited to
`MAX_CRON_COUNT`. Without `count`, `first_at_or_after` returns the whole minutes
elapsed since `start_ms` as seq: an opaque counter that never decreases across
calls (distinct cron times are at least a minute apart), which is all callers need.

`normalize(trigger, created_ms)` fills the start when the client left it out: an
interval then begins at `created_ms + every_ms`, and a cron trigger counts its
occurrences from `created_ms`. Apply it before `occurrence`/`first_at_or_after`.
Both raise `ValueError` if they need a start and there is none.

Cron expressions
----------------
Evaluated with `cronsim` (imported only here): five fields (minute hour
day-of-month month day-of-week), Debian cron semantics (if either day field
starts with `*`, both must match; otherwise either does), names (`MON`, `JAN`),
and cronsim's extensions `L`, `LW`, `5L` and `MON#2`. Supported macros:
`@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`.
`@reboot` is rejected, and so is a sixth (seconds) field: the API documents five
fields, and cronsim leaves 6-field expressions out of its DST handling, so
`0 30 2 * * *` would silently skip the spring-forward day.

Why cronsim rather than croniter: croniter 7.0.0 runs a fixed-time job twice on a
fall-back night (`30 1 * * *` gives 2026-11-01 01:30 EDT and 01:30 EST in
America/New_York, 2026-10-25 01:30 BST and GMT in Europe/London), and also fires
wildcard-minute jobs whose hour is skipped (`*/5 2 * * *` at 03:00 EDT on the
spring-forward day). cronsim deliberately reproduces Debian cron's DST rules and
gets all the required cases right. It is not perfect either: for wildcard-hour
jobs it skips matches when a DST change is not a whole hour or not on the hour
(Australia/Lord_Howe, Pacific/Chatham), so those are evaluated here (below).

Daylight-saving time (the Debian cron rule)
-------------------------------------------
* Fixed-time jobs (minute and hour fields not starting with `*`, e.g. `30 2 * * *`,
  `0 9 * * MON-FRI`, `@daily`) are evaluated on the local wall clock, by cronsim:
  - spring forward: a time that does not exist that day fires once, at the first
    real minute after it, i.e. at the jump (`30 2 * * *` in America/New_York fires
    at 03:00 EDT on 2026-03-08). Several missing times that land on the same
    instant fire once.
  - fall back: a time that occurs twice fires once, at its first instance
    (`30 1 * * *` fires at 01:30 EDT on 2026-11-01, not again at 01:30 EST).
* Wildcard-hour jobs (minute or hour field starting with `*`: `*/15 * * * *`,
  `0 * * * *`, `*/5 9-17 * * *`, `@hourly`) follow real elapsed time: each instant
  whose local wall time matches fires. Across fall-back `0 * * * *` fires at 01:00
  EDT and again an hour later at 01:00 EST (two distinct instants); times in the
  spring-forward gap do not exist and do not fire. Implementation: within a stretch
  of constant UTC offset, local time is shifted UTC, so cronsim is asked about the
  naive wall clock, and the search restarts at each offset change.

Occurrence times always strictly increase; repeated calls never return a time twice.

Performance
-----------
Parsing is cheap next to evaluation (about 8 us against 20-80 us per step), and
cronsim has no public way to reuse a parsed expression with a new start, so what
is cached is (a) the validated, macro-expanded expression with its loaded zone,
keyed on (expression, timezone), and (b) the next time after a given second,
keyed on (expression, timezone, second): schedules sharing an expression fire at
the same instants and so ask the same question.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TypeGuard
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = [
    "MAX_COUNT",
    "MAX_CRON_COUNT",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INTERVAL_MS",
    "MAX_TIME_MS",
    "MIN_INTERVAL_MS",
    "MIN_TIME_MS",
    "CronTrigger",
    "IntervalTrigger",
    "OnceTrigger",
    "Trigger",
    "TriggerError",
    "describe",
    "first_at_or_after",
    "normalize",
    "occurrence",
    "validate",
]

MIN_TIME_MS = 0  # 1970-01-01T00:00:00Z
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MIN_INTERVAL_MS = 1_000  # the API documents "at least one second"
MAX_INTERVAL_MS = 3_660 * 86_400_000  # a little over ten years (the API's longest duration)
MAX_COUNT = 2**32 - 1  # the API's count is a uint32
MAX_CRON_COUNT = 100_000  # cron seq is counted by iteration; bounds that work
MAX_EXPRESSION_LENGTH = 256
_MAX_TIMEZONE_LENGTH = 64

_MS_PER_MINUTE = 60_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
# A cron time that is not after the previous one is skipped (cronsim may repeat an
# instant around a DST change); this bounds such skips in a row.
_MAX_SKIPS = 10_000

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EXPRESSION_CHARS = re.compile(r"[A-Za-z0-9*/,#@\- \t]+")
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")
# Names zoneinfo may load that are not proper IANA zones: machine-dependent
# ("localtime"), leap-second clocks ("right/..."), or placeholders.
_REJECTED_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_REJECTED_ZONE_PREFIXES = ("right/", "posix/")
# Zones without offsets changes: evaluated with datetime.UTC, which is much faster.
_UTC_ALIASES = frozenset(
    {"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu"}
)


class TriggerError(ValueError):
    """Invalid trigger; .field names the offending field (e.g. 'cron.expression',
    'cron.timezone', 'interval.every', 'interval.end', 'once.at')."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class OnceTrigger:
    at_ms: int


@dataclass(frozen=True, slots=True)
class IntervalTrigger:
    every_ms: int
    start_ms: int | None = None  # None: first occurrence is created_ms + every_ms (normalize())
    end_ms: int | None = None  # exclusive upper bound on occurrence times
    count: int | None = None  # max number of occurrences


@dataclass(frozen=True, slots=True)
class CronTrigger:
    expression: str  # five fields or a macro (see the module docstring)
    timezone: str = "UTC"  # IANA zone name
    start_ms: int | None = None  # occurrences at or after start (None: created_ms, normalize())
    end_ms: int | None = None  # exclusive
    count: int | None = None


Trigger = OnceTrigger | IntervalTrigger | CronTrigger


# --- validation --------------------------------------------------------------------


def validate(trigger: Trigger) -> None:
    """Raises TriggerError naming the first invalid field.

    Limits: times within 1970..9999 (`MIN_TIME_MS`..`MAX_TIME_MS`); an interval of
    1 s (`MIN_INTERVAL_MS`) to about 10 years (`MAX_INTERVAL_MS`); `count` from 1 to
    `MAX_COUNT` (`MAX_CRON_COUNT` for cron); `end_ms` after `start_ms` when both are
    set; a cron expression that parses and matches at least once in 50 years; a
    time zone known to the IANA database.
    """
    if isinstance(trigger, OnceTrigger):
        _check_time(trigger.at_ms, "once.at")
    elif isinstance(trigger, IntervalTrigger):
        every = trigger.every_ms
        if not _is_int(every):
            raise TriggerError("interval.every", "must be an integer number of milliseconds")
        if every < MIN_INTERVAL_MS:
            raise TriggerError("interval.every", "must be at least 1 second")
        if every > MAX_INTERVAL_MS:
            raise TriggerError("interval.every", "must be at most 10 years")
        _check_window(trigger.start_ms, trigger.end_ms, trigger.count, "interval", MAX_COUNT)
    elif isinstance(trigger, CronTrigger):
        _compile(
            _check_str(trigger.expression, "cron.expression"),
            _check_str(trigger.timezone, "cron.timezone"),
        )
        _check_window(trigger.start_ms, trigger.end_ms, trigger.count, "cron", MAX_CRON_COUNT)
    else:
        raise TriggerError("trigger", "one of once, interval or cron is required")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise TriggerError(field, "must be a string")
    return value


def _check_time(value: object, field: str) -> None:
    if not _is_int(value):
        raise TriggerError(field, "must be an integer number of milliseconds since the epoch")
    if not MIN_TIME_MS <= value <= MAX_TIME_MS:
        raise TriggerError(field, "must be between 1970 and 9999")


def _check_window(
    start_ms: int | None, end_ms: int | None, count: int | None, kind: str, max_count: int
) -> None:
    if start_ms is not None:
        _check_time(start_ms, f"{kind}.start")
    if end_ms is not None:
        _check_time(end_ms, f"{kind}.end")
        if start_ms is not None and end_ms <= start_ms:
            raise TriggerError(f"{kind}.end", "must be after the start")
    if count is not None:
        if not _is_int(count):
            raise TriggerError(f"{kind}.count", "must be an integer")
        if not 1 <= count <= max_count:
            raise TriggerError(f"{kind}.count", f"must be between 1 and {max_count}")


# --- cron evaluation ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Cron:
    expression: str  # five fields, macros expanded
    zone: tzinfo
    # Debian's "fixed-time job": neither the minute nor the hour field starts with '*'.
    fixed_time: bool

    def times_after(self, after_ms: int) -> Iterator[int]:
        """Occurrence times strictly after `after_ms`, strictly increasing, until 9999."""
        if self.zone is UTC or self.fixed_time:
            times = self._cronsim_times(after_ms)
        else:
            times = self._real_time_times(after_ms)
        try:
            yield from times
        except OverflowError:  # a local time past 9999-12-31
            return

    def _cronsim_times(self, after_ms: int) -> Iterator[int]:
        """UTC, and fixed-time jobs in any zone: cronsim's own DST handling (Debian's)."""
        start = _EPOCH + timedelta(seconds=after_ms // 1000)
        if self.zone is not UTC:
            start = start.astimezone(self.zone)
        # CronSim yields the matches strictly after `start`. It evaluates fixed-time
        # expressions on the naive wall clock; restarted from the second instance of
        # a repeated (fall-back) hour, it can yield earlier instants first: skip them.
        it = CronSim(self.expression, start)
        last = after_ms
        skipped = 0
        while skipped < _MAX_SKIPS:
            try:
                found = next(it)
            except StopIteration:  # nothing in 50 years
                return
            ms = (found - _EPOCH) // _ONE_MS
            if ms > MAX_TIME_MS:
                return
            if ms > last:
                last = ms
                skipped = 0
                yield ms
            else:
                skipped += 1

    def _real_time_times(self, after_ms: int) -> Iterator[int]:
        """Wildcard-hour jobs: every instant whose local wall time matches.

        cronsim's own evaluation of these in a zone jumps over matches when a DST
        change is not a whole hour or not on the hour (Australia/Lord_Howe,
        Pacific/Chatham), so the zone is handled here: within a stretch of constant
        UTC offset the wall clock is just shifted UTC, and cronsim is asked about
        the naive wall clock only; at each offset change the search restarts.
        """
        zone = self.zone
        last = after_ms
        while True:
            offset = _offset_ms(zone, last + 1)
            it = CronSim(self.expression, _naive(last + offset))
            checked = last + 1  # the offset is known to be `offset` from here on
            while True:
                try:
                    wall = next(it)
                except StopIteration:
                    return
                candidate = (wall - _NAIVE_EPOCH) // _ONE_MS - offset
                if candidate > MAX_TIME_MS:
                    return
                change = _offset_change(zone, checked, candidate, offset)
                if change is not None:
                    last = change - 1  # continue from the change, with the new offset
                    break
                checked = last = candidate
                yield candidate


_NAIVE_EPOCH = datetime(1970, 1, 1)
# Offset changes are looked for by probing at this step and bisecting; since 1970 the
# closest two changes of any zone are about a week apart.
_OFFSET_PROBE_MS = 6 * 3_600_000


def _naive(ms: int) -> datetime:
    """The naive datetime `ms` milliseconds after 1970-01-01T00:00 (a wall-clock time)."""
    return _NAIVE_EPOCH + timedelta(milliseconds=ms)


def _offset_ms(zone: tzinfo, ms: int) -> int:
    offset = (_EPOCH + timedelta(milliseconds=ms)).astimezone(zone).utcoffset()
    assert offset is not None
    return offset // _ONE_MS


def _offset_change(zone: tzinfo, lo: int, hi: int, offset: int) -> int | None:
    """The first instant in (lo, hi] whose UTC offset differs from `offset`, which is
    the offset at `lo`; None if there is none."""
    same = lo
    while same < hi:
        probe = min(same + _OFFSET_PROBE_MS, hi)
        if _offset_ms(zone, probe) == offset:
            same = probe
            continue
        while probe - same > 1:  # offset(same) == offset != offset(probe)
            mid = (same + probe) // 2
            if _offset_ms(zone, mid) == offset:
                same = mid
            else:
                probe = mid
        return probe
    return None


@functools.lru_cache(maxsize=1024)
def _compile(expression: str, timezone: str) -> _Cron:
    """The validated expression and zone; raises TriggerError."""
    text = expression.strip()
    if not text:
        raise TriggerError("cron.expression", "is required")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise TriggerError("cron.expression", f"must be at most {MAX_EXPRESSION_LENGTH} characters")
    if not _EXPRESSION_CHARS.fullmatch(text):
        raise TriggerError("cron.expression", "contains characters not allowed in cron")
    if text.startswith("@"):
        expanded = _MACROS.get(text.lower())
        if expanded is None:
            raise TriggerError(
                "cron.expression",
                f"unknown macro {text!r}; use @yearly, @monthly, @weekly, @daily or @hourly",
            )
        text = expanded
    fields = text.split()
    if len(fields) == 6:
        raise TriggerError(
            "cron.expression",
            "a seconds field is not supported; use 5 fields "
            "(minute hour day-of-month month day-of-week)",
        )
    if len(fields) != 5:
        raise TriggerError(
            "cron.expression",
            f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    normalized = " ".join(fields)
    try:
        CronSim(normalized, _EPOCH)
    except (CronSimError, ValueError, TypeError, IndexError) as exc:
        raise TriggerError("cron.expression", f"invalid: {exc}") from exc
    fixed_time = not fields[0].startswith("*") and not fields[1].startswith("*")
    cron = _Cron(normalized, _zone(timezone), fixed_time)
    if next(cron.times_after(946_684_800_000), None) is None:  # from 2000-01-01
        raise TriggerError("cron.expression", "never matches")
    return cron


def _zone(name: str) -> tzinfo:
    if name in _UTC_ALIASES:
        return UTC
    if (
        len(name) > _MAX_TIMEZONE_LENGTH
        or not _ZONE_NAME.fullmatch(name)
        or name in _REJECTED_ZONES
        or name.startswith(_REJECTED_ZONE_PREFIXES)
    ):
        raise TriggerError("cron.timezone", f"{name!r} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as exc:  # KeyError: ZoneInfoNotFoundError
        raise TriggerError("cron.timezone", f"unknown time zone {name!r}") from exc


@functools.lru_cache(maxsize=16_384)
def _next_after_s(expression: str, timezone: str, after_s: int) -> int | None:
    return next(_compile(expression, timezone).times_after(after_s * 1000), None)


def _cron_next_after(trigger: CronTrigger, after_ms: int) -> int | None:
    """The first time strictly after `after_ms` (cached: many schedules share one)."""
    # Cron times are whole seconds, so "after after_ms" is "after its whole second".
    return _next_after_s(trigger.expression, trigger.timezone, after_ms // 1000)


# --- occurrences -------------------------------------------------------------------


def normalize(trigger: Trigger, created_ms: int) -> Trigger:
    """Resolves a missing start from the creation time; deterministic and idempotent.

    An interval without a start first fires at `created_ms + every_ms`; a cron
    trigger without a start counts its occurrences from `created_ms`.
    """
    if isinstance(trigger, IntervalTrigger) and trigger.start_ms is None:
        return replace(trigger, start_ms=created_ms + trigger.every_ms)
    if isinstance(trigger, CronTrigger) and trigger.start_ms is None:
        return replace(trigger, start_ms=created_ms)
    return trigger


def occurrence(trigger: Trigger, seq: int, prev_ms: int | None) -> int | None:
    """The time of occurrence `seq` (0-based); `prev_ms` is occurrence `seq - 1`'s time
    (None for seq 0). None when the trigger is exhausted."""
    if seq < 0:
        raise ValueError(f"seq must not be negative, got {seq}")
    if isinstance(trigger, OnceTrigger):
        return trigger.at_ms if seq == 0 else None
    if trigger.count is not None and seq >= trigger.count:
        return None
    if isinstance(trigger, IntervalTrigger):
        time = _interval_start(trigger) + seq * trigger.every_ms
    else:
        if prev_ms is None:
            after = _cron_start(trigger) - 1
        elif trigger.start_ms is not None:
            after = max(prev_ms, trigger.start_ms - 1)
        else:
            after = prev_ms
        found = _cron_next_after(trigger, after)
        if found is None:
            return None
        time = found
    return time if _within(trigger, time) else None


def first_at_or_after(trigger: Trigger, now_ms: int) -> tuple[int, int] | None:
    """(seq, time) of the first occurrence with time >= now_ms, or None if none is left."""
    if isinstance(trigger, OnceTrigger):
        return (0, trigger.at_ms) if trigger.at_ms >= now_ms else None
    if isinstance(trigger, IntervalTrigger):
        start = _interval_start(trigger)
        seq = 0 if now_ms <= start else -((start - now_ms) // trigger.every_ms)  # ceiling
        if trigger.count is not None and seq >= trigger.count:
            return None
        time = start + seq * trigger.every_ms
        return (seq, time) if _within(trigger, time) else None
    return _cron_first_at_or_after(trigger, now_ms)


def upcoming(trigger: Trigger, from_ms: int, limit: int) -> list[int]:
    """The times of the first `limit` occurrences at or after `from_ms`, in order
    (fewer when the trigger runs out). `trigger` must be normalized."""
    return [time for _, time in occurrences(trigger, from_ms, limit)]


def occurrences(trigger: Trigger, from_ms: int, limit: int) -> list[tuple[int, int]]:
    """(seq, time) of the first `limit` occurrences at or after `from_ms`, in order.
    `trigger` must be normalized."""
    found = first_at_or_after(trigger, from_ms) if limit > 0 else None
    if found is None:
        return []
    seq, time = found
    listed = [found]
    while len(listed) < limit:
        nxt = occurrence(trigger, seq + 1, time)
        if nxt is None:
            break
        seq, time = seq + 1, nxt
        listed.append((seq, time))
    return listed


def _cron_first_at_or_after(trigger: CronTrigger, now_ms: int) -> tuple[int, int] | None:
    if trigger.end_ms is not None and trigger.end_ms <= now_ms:
        return None
    if trigger.count is None:
        anchor = MIN_TIME_MS if trigger.start_ms is None else trigger.start_ms
        found = _cron_next_after(trigger, max(now_ms, anchor, MIN_TIME_MS) - 1)
        if found is None or not _within(trigger, found):
            return None
        return (found - anchor) // _MS_PER_MINUTE, found
    # The exact index: count the occurrences from the start (at most `count` of them).
    cron = _compile(trigger.expression, trigger.timezone)
    for seq, time in enumerate(cron.times_after(_cron_start(trigger) - 1)):
        if seq >= trigger.count or not _within(trigger, time):
            return None
        if time >= now_ms:
            return seq, time
    return None


def _interval_start(trigger: IntervalTrigger) -> int:
    if trigger.start_ms is None:
        raise ValueError("interval trigger has no start: normalize() it first")
    return trigger.start_ms


def _cron_start(trigger: CronTrigger) -> int:
    if trigger.start_ms is None:
        raise ValueError("cron trigger has no start: normalize() it first")
    return max(trigger.start_ms, MIN_TIME_MS)


def _within(trigger: IntervalTrigger | CronTrigger, time: int) -> bool:
    return time <= MAX_TIME_MS and (trigger.end_ms is None or time < trigger.end_ms)


# --- description -------------------------------------------------------------------


def describe(trigger: Trigger) -> str:
    """A short human summary, e.g. "every 5s", "cron '0 9 * * *' Europe/Paris",
    "once at 2026-03-08T07:00:00Z"."""
    if isinstance(trigger, OnceTrigger):
        return f"once at {_iso(trigger.at_ms)}"
    if isinstance(trigger, IntervalTrigger):
        head = f"every {_duration(trigger.every_ms)}"
    else:
        head = f"cron '{trigger.expression}' {trigger.timezone}"
    parts = [head]
    if trigger.start_ms is not None:
        parts.append(f"from {_iso(trigger.start_ms)}")
    if trigger.end_ms is not None:
        parts.append(f"until {_iso(trigger.end_ms)}")
    text = " ".join(parts)
    if trigger.count is not None:
        text += f", {trigger.count} time{'' if trigger.count == 1 else 's'}"
    return text


def describe_time(ms: int) -> str:
    """A time as `describe` writes it (ISO 8601, UTC)."""
    return _iso(ms)


def _iso(ms: int) -> str:
    try:
        dt = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms}ms since the epoch"
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))


def _duration(ms: int) -> str:
    if ms <= 0:
        return f"{ms}ms"
    parts = []
    for name, size in _UNITS:
        amount, ms = divmod(ms, size)
        if amount:
            parts.append(f"{amount}{name}")
    return "".join(parts)
