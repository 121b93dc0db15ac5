"""Trigger arithmetic: once, interval and cron (with real DST transitions)."""

from __future__ import annotations

import functools
import time as clock
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clockwork_svc.domain import triggers as tr
from clockwork_svc.domain.triggers import (
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
    TriggerError,
)

NY = "America/New_York"
LONDON = "Europe/London"
SECOND = 1_000
MINUTE = 60_000
HOUR = 3_600_000
DAY = 86_400_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def at(
    zone: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, fold: int = 0
) -> int:
    """Milliseconds of a local wall time (fold=1: the second instance of a repeated one)."""
    dt = datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone), fold=fold)
    return (dt - EPOCH) // timedelta(milliseconds=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return at("UTC", year, month, day, hour, minute)


def increasing_by(times: list[int], step: int) -> bool:
    return all(b - a == step for a, b in pairwise(times))


def local(ms: int, zone: str) -> datetime:
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(ZoneInfo(zone))


def chain(trigger: Trigger, limit: int) -> list[int]:
    """Successive occurrence() results from seq 0, up to `limit` of them."""
    out: list[int] = []
    prev: int | None = None
    for seq in range(limit):
        t = tr.occurrence(trigger, seq, prev)
        if t is None:
            break
        out.append(t)
        prev = t
    return out


def cron_between(expr: str, zone: str, start: int, end: int) -> list[int]:
    """All occurrences in [start, end)."""
    return chain(CronTrigger(expr, zone, start_ms=start, end_ms=end), 10_000)


def on_local_date(times: list[int], zone: str, day: date) -> list[datetime]:
    return [d for d in (local(t, zone) for t in times) if d.date() == day]


# --- once ------------------------------------------------------------------------


def test_once_fires_exactly_once() -> None:
    t = OnceTrigger(utc(2026, 5, 1, 12))
    tr.validate(t)
    assert tr.normalize(t, utc(2026, 1, 1)) == t
    assert tr.occurrence(t, 0, None) == t.at_ms
    assert tr.occurrence(t, 1, t.at_ms) is None
    assert tr.first_at_or_after(t, t.at_ms - 1) == (0, t.at_ms)
    assert tr.first_at_or_after(t, t.at_ms) == (0, t.at_ms)
    assert tr.first_at_or_after(t, t.at_ms + 1) is None


# --- interval --------------------------------------------------------------------


def test_interval_normalize_starts_one_period_after_creation() -> None:
    created = utc(2026, 1, 1)
    t = tr.normalize(IntervalTrigger(5 * SECOND), created)
    assert t == IntervalTrigger(5 * SECOND, start_ms=created + 5 * SECOND)
    assert tr.normalize(t, created + DAY) == t  # idempotent: the start is now fixed
    assert chain(t, 3) == [created + 5_000, created + 10_000, created + 15_000]


def test_interval_start_end_count() -> None:
    s = utc(2026, 1, 1)
    windowed = IntervalTrigger(MINUTE, start_ms=s, end_ms=s + 3 * MINUTE)
    assert chain(windowed, 100) == [s, s + MINUTE, s + 2 * MINUTE]  # end is exclusive
    counted = IntervalTrigger(MINUTE, start_ms=s, count=2)
    assert chain(counted, 100) == [s, s + MINUTE]
    assert tr.occurrence(counted, 2, s + MINUTE) is None
    both = IntervalTrigger(MINUTE, start_ms=s, end_ms=s + 10 * MINUTE, count=4)
    assert len(chain(both, 100)) == 4


def test_interval_first_at_or_after() -> None:
    s = utc(2026, 1, 1)
    t = IntervalTrigger(10 * SECOND, start_ms=s, end_ms=s + 100 * SECOND, count=8)
    assert tr.first_at_or_after(t, s - DAY) == (0, s)
    assert tr.first_at_or_after(t, s) == (0, s)
    assert tr.first_at_or_after(t, s + 1) == (1, s + 10_000)
    assert tr.first_at_or_after(t, s + 30_000) == (3, s + 30_000)
    assert tr.first_at_or_after(t, s + 30_001) == (4, s + 40_000)
    assert tr.first_at_or_after(t, s + 70_000) == (7, s + 70_000)
    assert tr.first_at_or_after(t, s + 70_001) is None  # seq 8 would exceed count
    ended = IntervalTrigger(10 * SECOND, start_ms=s, end_ms=s + 30_000)
    assert tr.first_at_or_after(ended, s + 20_000) == (2, s + 20_000)
    assert tr.first_at_or_after(ended, s + 20_001) is None  # s + 30s is the (exclusive) end


def test_interval_first_at_or_after_is_arithmetic_for_huge_gaps() -> None:
    s = utc(2016, 1, 1)
    t = IntervalTrigger(SECOND, start_ms=s)
    ten_years = 3653 * DAY
    now = s + ten_years + 1
    started = clock.perf_counter()
    for _ in range(1_000):
        found = tr.first_at_or_after(t, now)
    elapsed = clock.perf_counter() - started
    assert found == (ten_years // SECOND + 1, s + ten_years + SECOND)
    assert tr.occurrence(t, found[0], None) == found[1]
    assert elapsed < 0.5  # 1000 calls; iterating would take minutes
    big = IntervalTrigger(SECOND, start_ms=s, count=tr.MAX_COUNT)
    assert tr.first_at_or_after(big, s + tr.MAX_COUNT * SECOND) is None
    assert tr.first_at_or_after(big, s + (tr.MAX_COUNT - 1) * SECOND) == (
        tr.MAX_COUNT - 1,
        s + (tr.MAX_COUNT - 1) * SECOND,
    )


def test_interval_stops_before_year_10000() -> None:
    t = IntervalTrigger(tr.MAX_INTERVAL_MS, start_ms=tr.MAX_TIME_MS - 5)
    assert tr.occurrence(t, 0, None) == tr.MAX_TIME_MS - 5
    assert tr.occurrence(t, 1, tr.MAX_TIME_MS - 5) is None
    assert tr.first_at_or_after(t, tr.MAX_TIME_MS) is None


def test_occurrence_needs_a_normalized_trigger() -> None:
    with pytest.raises(ValueError, match="normalize"):
        tr.occurrence(IntervalTrigger(SECOND), 0, None)
    with pytest.raises(ValueError, match="normalize"):
        tr.first_at_or_after(IntervalTrigger(SECOND), 0)
    with pytest.raises(ValueError, match="normalize"):
        tr.occurrence(CronTrigger("* * * * *"), 0, None)
    with pytest.raises(ValueError, match="negative"):
        tr.occurrence(OnceTrigger(0), -1, None)


# --- cron basics -----------------------------------------------------------------


def test_cron_normalize_counts_from_creation() -> None:
    created = utc(2026, 1, 1, 9, 30)
    t = tr.normalize(CronTrigger("0 * * * *", count=2), created)
    assert t == CronTrigger("0 * * * *", start_ms=created, count=2)
    assert tr.normalize(t, created + DAY) == t
    assert chain(t, 10) == [utc(2026, 1, 1, 10), utc(2026, 1, 1, 11)]


def test_cron_start_is_inclusive_end_exclusive() -> None:
    s = utc(2026, 1, 1, 10)
    t = CronTrigger("0 * * * *", start_ms=s, end_ms=utc(2026, 1, 1, 13))
    assert chain(t, 100) == [s, s + HOUR, s + 2 * HOUR]
    assert tr.first_at_or_after(t, utc(2026, 1, 1, 12) + 1) is None
    assert tr.first_at_or_after(t, utc(2026, 1, 1, 14)) is None


def test_cron_count_and_exact_seq() -> None:
    s = utc(2026, 1, 1)
    t = CronTrigger("*/10 * * * *", "Europe/Paris", start_ms=s, count=5)
    times = chain(t, 100)
    assert times == [s + i * 10 * MINUTE for i in range(5)]
    for seq, time in enumerate(times):
        assert tr.first_at_or_after(t, time) == (seq, time)
        assert tr.first_at_or_after(t, time - 1) == (seq, time)
    assert tr.first_at_or_after(t, times[-1] + 1) is None
    assert tr.occurrence(t, 5, times[-1]) is None


def test_cron_seq_without_count_only_grows() -> None:
    s = utc(2026, 1, 1)
    t = CronTrigger("*/5 * * * *", start_ms=s)
    seq, time = tr.first_at_or_after(t, s + DAY + 1) or (-1, -1)
    assert time == s + DAY + 5 * MINUTE
    assert seq >= 0
    # Chain from there, then "resume" later: the seq handed out never goes back.
    last_seq, prev = seq, time
    for _ in range(20):
        nxt = tr.occurrence(t, last_seq + 1, prev)
        assert nxt is not None and nxt > prev
        last_seq, prev = last_seq + 1, nxt
    resumed = tr.first_at_or_after(t, prev + 1)
    assert resumed is not None and resumed[0] > last_seq and resumed[1] > prev


def test_cron_occurrence_after_prev_before_start_respects_start() -> None:
    s = utc(2026, 1, 1, 10)
    t = CronTrigger("0 * * * *", start_ms=s)
    assert tr.occurrence(t, 1, utc(2026, 1, 1, 3)) == s


def test_cron_macros() -> None:
    s = at(NY, 2026, 3, 7, 12)
    daily = chain(CronTrigger("@daily", NY, start_ms=s), 3)
    assert daily == chain(CronTrigger("0 0 * * *", NY, start_ms=s), 3)
    assert chain(CronTrigger("@HOURLY", start_ms=utc(2026, 1, 1)), 2) == [
        utc(2026, 1, 1),
        utc(2026, 1, 1, 1),
    ]
    assert chain(CronTrigger("@weekly", start_ms=utc(2026, 1, 1)), 1) == [utc(2026, 1, 4)]
    assert chain(CronTrigger("@monthly", start_ms=utc(2026, 1, 2)), 1) == [utc(2026, 2, 1)]
    assert chain(CronTrigger("@yearly", start_ms=utc(2026, 1, 2)), 1) == [utc(2027, 1, 1)]


def test_cron_extensions_and_day_semantics() -> None:
    s = utc(2026, 1, 1)
    assert chain(CronTrigger("0 0 L * *", start_ms=s), 2) == [utc(2026, 1, 31), utc(2026, 2, 28)]
    assert chain(CronTrigger("0 9 * * MON#2", start_ms=s), 1) == [utc(2026, 1, 12, 9)]
    # Both day fields restricted: either matches (Debian); 2026-01-01 is a Thursday.
    assert chain(CronTrigger("0 0 13 * FRI", start_ms=s), 2) == [utc(2026, 1, 2), utc(2026, 1, 9)]


def test_cron_stops_near_year_9999() -> None:
    t = CronTrigger("0 0 1 1 *", start_ms=utc(9999, 6, 1))
    assert tr.occurrence(t, 0, None) is None
    assert tr.first_at_or_after(t, utc(9999, 6, 1)) is None


# --- cron across DST -------------------------------------------------------------


def test_spring_forward_fixed_job_in_the_gap_fires_once_at_the_jump_new_york() -> None:
    times = cron_between("30 2 * * *", NY, at(NY, 2026, 3, 6), at(NY, 2026, 3, 11))
    that_day = on_local_date(times, NY, date(2026, 3, 8))
    assert [d.isoformat() for d in that_day] == ["2026-03-08T03:00:00-04:00"]
    assert [local(t, NY).strftime("%d %H:%M") for t in times] == [
        "06 02:30",
        "07 02:30",
        "08 03:00",
        "09 02:30",
        "10 02:30",
    ]


def test_spring_forward_fixed_job_in_the_gap_fires_once_at_the_jump_london() -> None:
    # Europe/London jumps from 01:00 GMT to 02:00 BST on 2026-03-29.
    times = cron_between("30 1 * * *", LONDON, at(LONDON, 2026, 3, 28), at(LONDON, 2026, 3, 31))
    assert [local(t, LONDON).isoformat() for t in times] == [
        "2026-03-28T01:30:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:30:00+01:00",
    ]


def test_spring_forward_missing_times_collapse_into_one_firing() -> None:
    times = cron_between("0,30 2-3 * * *", NY, at(NY, 2026, 3, 8), at(NY, 2026, 3, 9))
    assert [local(t, NY).strftime("%H:%M%z") for t in times] == ["03:00-0400", "03:30-0400"]


def next_time(trigger: Trigger, now: int) -> int | None:
    found = tr.first_at_or_after(trigger, now)
    return None if found is None else found[1]


def test_spring_forward_first_at_or_after_around_the_gap() -> None:
    t = CronTrigger("30 2 * * *", NY, start_ms=0)
    jump = at(NY, 2026, 3, 8, 3)
    assert jump - at(NY, 2026, 3, 8, 1, 59) == MINUTE
    assert next_time(t, at(NY, 2026, 3, 8, 1, 59)) == jump
    assert next_time(t, jump) == jump
    assert next_time(t, jump + 1) == at(NY, 2026, 3, 9, 2, 30)


def test_fall_back_fixed_job_in_the_repeated_hour_fires_once_at_the_first_instance() -> None:
    times = cron_between("30 1 * * *", NY, at(NY, 2026, 10, 31), at(NY, 2026, 11, 3))
    assert [local(t, NY).isoformat() for t in times] == [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    london = cron_between("30 1 * * *", LONDON, at(LONDON, 2026, 10, 24), at(LONDON, 2026, 10, 27))
    assert [local(t, LONDON).isoformat() for t in london] == [
        "2026-10-24T01:30:00+01:00",
        "2026-10-25T01:30:00+01:00",
        "2026-10-26T01:30:00+00:00",
    ]


def test_fall_back_fixed_job_is_not_repeated_when_resumed_inside_the_second_hour() -> None:
    t = CronTrigger("45 1 * * *", NY, start_ms=0)
    first_pass = at(NY, 2026, 11, 1, 1, 40, fold=0)  # 01:40 EDT
    second_pass = at(NY, 2026, 11, 1, 1, 40, fold=1)  # 01:40 EST, an hour later
    assert second_pass - first_pass == HOUR
    assert next_time(t, first_pass) == at(NY, 2026, 11, 1, 1, 45)
    # 01:45 EDT has passed for real; 01:45 EST is the same wall time again: skip it.
    assert next_time(t, second_pass) == at(NY, 2026, 11, 2, 1, 45)
    assert tr.occurrence(t, 1, second_pass) == at(NY, 2026, 11, 2, 1, 45)


def test_fall_back_hourly_job_fires_at_each_real_hour() -> None:
    times = cron_between("0 * * * *", NY, at(NY, 2026, 11, 1), at(NY, 2026, 11, 2))
    assert len(times) == 25  # the local day has 25 hours
    assert increasing_by(times, HOUR)
    labels = [local(t, NY).strftime("%H:%M%z") for t in times[:4]]
    assert labels == ["00:00-0400", "01:00-0400", "01:00-0500", "02:00-0500"]
    assert (
        chain(
            CronTrigger("@hourly", NY, start_ms=at(NY, 2026, 11, 1), end_ms=at(NY, 2026, 11, 2)),
            100,
        )
        == times
    )


def test_spring_forward_hourly_job_follows_real_time() -> None:
    times = cron_between("0 * * * *", NY, at(NY, 2026, 3, 8), at(NY, 2026, 3, 9))
    assert len(times) == 23
    assert increasing_by(times, HOUR)
    assert "02:00" not in [local(t, NY).strftime("%H:%M") for t in times]
    london = cron_between("0 * * * *", LONDON, at(LONDON, 2026, 10, 25), at(LONDON, 2026, 10, 26))
    assert len(london) == 25


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        (NY, date(2026, 3, 8)),
        (NY, date(2026, 11, 1)),
        (LONDON, date(2026, 3, 29)),
        (LONDON, date(2026, 10, 25)),
    ],
)
def test_quarter_hourly_job_keeps_real_fifteen_minute_spacing(zone: str, day: date) -> None:
    start = at(zone, day.year, day.month, day.day) - 6 * HOUR
    times = cron_between("*/15 * * * *", zone, start, start + 36 * HOUR)
    assert len(times) == 36 * 4
    assert increasing_by(times, 15 * MINUTE)


def test_fixed_times_keep_wall_clock_across_dst() -> None:
    times = cron_between("0 9 * * *", NY, at(NY, 2026, 3, 7), at(NY, 2026, 3, 10))
    assert [local(t, NY).strftime("%H:%M") for t in times] == ["09:00"] * 3
    assert times[1] - times[0] == 23 * HOUR


def test_spring_forward_wildcard_minute_job_in_the_missing_hour_does_not_fire() -> None:
    times = cron_between("*/5 2 * * *", NY, at(NY, 2026, 3, 7), at(NY, 2026, 3, 10))
    per_day = [len(on_local_date(times, NY, date(2026, 3, d))) for d in (7, 8, 9)]
    assert per_day == [12, 0, 12]  # 02:xx does not exist on the 8th (not moved to 03:00)


def test_fall_back_wildcard_minute_job_runs_in_both_instances_of_the_hour() -> None:
    times = cron_between("*/30 1 * * *", NY, at(NY, 2026, 11, 1), at(NY, 2026, 11, 2))
    assert [local(t, NY).strftime("%H:%M%z") for t in times] == [
        "01:00-0400",
        "01:30-0400",
        "01:00-0500",
        "01:30-0500",
    ]


def test_half_hour_dst_shift_lord_howe() -> None:
    # Australia/Lord_Howe falls back from 02:00 (+11) to 01:30 (+10:30) on 2026-04-05,
    # and springs forward from 02:00 (+10:30) to 02:30 (+11) on 2026-10-04.
    zone = "Australia/Lord_Howe"
    back = cron_between("30 * * * *", zone, at(zone, 2026, 4, 5), at(zone, 2026, 4, 5, 4))
    assert [local(t, zone).strftime("%H:%M%z") for t in back] == [
        "00:30+1100",
        "01:30+1100",
        "01:30+1030",
        "02:30+1030",
        "03:30+1030",
    ]
    forward = cron_between("30 * * * *", zone, at(zone, 2026, 10, 4), at(zone, 2026, 10, 4, 4))
    assert [local(t, zone).strftime("%H:%M%z") for t in forward] == [
        "00:30+1030",
        "01:30+1030",
        "02:30+1100",
        "03:30+1100",
    ]
    fixed = cron_between("15 2 * * *", zone, at(zone, 2026, 10, 3), at(zone, 2026, 10, 6))
    assert [local(t, zone).strftime("%d %H:%M%z") for t in fixed] == [
        "03 02:15+1030",
        "04 02:30+1100",
        "05 02:15+1100",
    ]


def test_dst_change_off_the_hour_chatham() -> None:
    # Pacific/Chatham falls back from 03:45 (+13:45) to 02:45 (+12:45) on 2026-04-05.
    zone = "Pacific/Chatham"
    times = cron_between("*/5 2 * * *", zone, at(zone, 2026, 4, 5), at(zone, 2026, 4, 6))
    labels = [local(t, zone).strftime("%H:%M%z") for t in times]
    assert len(labels) == 15
    assert labels[-4:] == ["02:55+1345", "02:45+1245", "02:50+1245", "02:55+1245"]


@pytest.mark.parametrize("expr", ["0 0 1 1 *", "*/5 * * * *", "0 * * * *"])
def test_cron_in_a_far_east_zone_stops_at_year_9999(expr: str) -> None:
    zone = "Pacific/Kiritimati"  # UTC+14
    t = CronTrigger(expr, zone, start_ms=tr.MAX_TIME_MS - DAY)
    times = chain(t, 1_000)
    assert all(x <= tr.MAX_TIME_MS for x in times)
    assert tr.first_at_or_after(t, tr.MAX_TIME_MS) is None
    assert tr.occurrence(t, 1, tr.MAX_TIME_MS) is None


# --- validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (OnceTrigger(-1), "once.at"),
        (OnceTrigger(tr.MAX_TIME_MS + 1), "once.at"),
        (OnceTrigger(True), "once.at"),
        (IntervalTrigger(0), "interval.every"),
        (IntervalTrigger(-5), "interval.every"),
        (IntervalTrigger(999), "interval.every"),
        (IntervalTrigger(tr.MAX_INTERVAL_MS + 1), "interval.every"),
        (IntervalTrigger(SECOND, start_ms=-1), "interval.start"),
        (IntervalTrigger(SECOND, end_ms=tr.MAX_TIME_MS + 1), "interval.end"),
        (IntervalTrigger(SECOND, start_ms=5_000, end_ms=5_000), "interval.end"),
        (IntervalTrigger(SECOND, start_ms=5_000, end_ms=4_000), "interval.end"),
        (IntervalTrigger(SECOND, count=0), "interval.count"),
        (IntervalTrigger(SECOND, count=-1), "interval.count"),
        (IntervalTrigger(SECOND, count=tr.MAX_COUNT + 1), "interval.count"),
        (CronTrigger(""), "cron.expression"),
        (CronTrigger("61 * * * *"), "cron.expression"),
        (CronTrigger("* * * *"), "cron.expression"),
        (CronTrigger("0 30 2 * * *"), "cron.expression"),  # seconds field: not supported
        (CronTrigger("0 0 31 2 *"), "cron.expression"),  # never exists
        (CronTrigger("@reboot"), "cron.expression"),
        (CronTrigger("0 0 ? * *"), "cron.expression"),
        (CronTrigger("* * * * * " * 60), "cron.expression"),
        (CronTrigger("* * * * *", "Mars/Olympus_Mons"), "cron.timezone"),
        (CronTrigger("* * * * *", ""), "cron.timezone"),
        (CronTrigger("* * * * *", "utc"), "cron.timezone"),
        (CronTrigger("* * * * *", "America"), "cron.timezone"),
        (CronTrigger("* * * * *", "../etc/passwd"), "cron.timezone"),
        (CronTrigger("* * * * *", "localtime"), "cron.timezone"),
        (CronTrigger("* * * * *", start_ms=10_000, end_ms=10_000), "cron.end"),
        (CronTrigger("* * * * *", start_ms=tr.MAX_TIME_MS + 1), "cron.start"),
        (CronTrigger("* * * * *", count=0), "cron.count"),
        (CronTrigger("* * * * *", count=tr.MAX_CRON_COUNT + 1), "cron.count"),
    ],
)
def test_validation_names_the_field(trigger: Trigger, field: str) -> None:
    with pytest.raises(TriggerError) as info:
        tr.validate(trigger)
    assert info.value.field == field
    assert info.value.message
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError)


def test_validation_of_a_bad_expression_with_a_bad_zone_names_the_expression() -> None:
    with pytest.raises(TriggerError) as info:
        tr.validate(CronTrigger("nope", "Nowhere/Land"))
    assert info.value.field == "cron.expression"


def test_validation_rejects_an_unknown_trigger_type() -> None:
    with pytest.raises(TriggerError) as info:
        tr.validate("every minute")  # type: ignore[arg-type]
    assert info.value.field == "trigger"


@pytest.mark.parametrize(
    "trigger",
    [
        OnceTrigger(0),
        OnceTrigger(tr.MAX_TIME_MS),
        IntervalTrigger(SECOND),
        IntervalTrigger(tr.MAX_INTERVAL_MS, start_ms=0, end_ms=1, count=tr.MAX_COUNT),
        CronTrigger("*/5 * * * *"),
        CronTrigger("0 9 * * mon-fri", "Europe/Paris", start_ms=0, end_ms=DAY, count=3),
        CronTrigger("  0   0 L * *  ", "Australia/Lord_Howe"),
        CronTrigger("@midnight", "Etc/UTC"),
        CronTrigger("0 0 29 2 *", "US/Eastern"),
        CronTrigger("* * * * *", count=tr.MAX_CRON_COUNT),
    ],
)
def test_validation_accepts(trigger: Trigger) -> None:
    tr.validate(trigger)


# --- describe --------------------------------------------------------------------


def test_describe() -> None:
    assert tr.describe(IntervalTrigger(5 * SECOND)) == "every 5s"
    assert tr.describe(IntervalTrigger(90 * MINUTE + 1500)) == "every 1h30m1s500ms"
    assert tr.describe(CronTrigger("0 9 * * *", "Europe/Paris")) == "cron '0 9 * * *' Europe/Paris"
    assert tr.describe(OnceTrigger(utc(2026, 3, 8, 7))) == "once at 2026-03-08T07:00:00Z"
    assert tr.describe(OnceTrigger(utc(2026, 3, 8, 7) + 250)) == "once at 2026-03-08T07:00:00.250Z"
    assert tr.describe(IntervalTrigger(DAY, start_ms=0, end_ms=DAY * 10, count=1)) == (
        "every 1d from 1970-01-01T00:00:00Z until 1970-01-11T00:00:00Z, 1 time"
    )
    assert tr.describe(CronTrigger("@daily", count=3)) == "cron '@daily' UTC, 3 times"


# --- properties ------------------------------------------------------------------

ZONES = [
    "UTC",
    NY,
    LONDON,
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Beirut",
    "Asia/Kolkata",
    "America/Havana",
]
EXPRESSIONS = [
    "30 2 * * *",
    "30 1 * * *",
    "0 * * * *",
    "*/15 * * * *",
    "0 0 * * *",
    "59 23 * * *",
    "0,30 0-3 * * *",
    "15 2 * * 0",
    "0 0 1 * *",
    "@hourly",
    "@daily",
    "*/7 1-3 * * *",
    "* 2 * * *",
    "0 1 * * *",
    "45 0 * * *",
    "0 0 L * *",
]
starts = st.integers(min_value=utc(2000, 1, 1), max_value=utc(2040, 1, 1))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ZONES), st.sampled_from(EXPRESSIONS), starts)
def test_cron_occurrences_strictly_increase(zone: str, expr: str, start: int) -> None:
    t = CronTrigger(expr, zone, start_ms=start)
    tr.validate(t)
    times = chain(t, 40)
    assert len(times) == 40
    assert times[0] >= start
    assert all(a < b for a, b in pairwise(times))
    for seq, time in enumerate(times):
        nxt = tr.occurrence(t, seq + 1, time)
        assert nxt is not None and nxt > time
        # first_at_or_after agrees with the chain.
        found = tr.first_at_or_after(t, time)
        assert found is not None and found[1] == time


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(ZONES),
    st.sampled_from(EXPRESSIONS),
    starts,
    st.integers(min_value=1, max_value=30),
)
def test_cron_counted_seq_matches_the_chain(zone: str, expr: str, start: int, count: int) -> None:
    t = CronTrigger(expr, zone, start_ms=start, count=count)
    times = chain(t, 1_000)
    assert len(times) == count
    for seq, time in enumerate(times):
        assert tr.first_at_or_after(t, time) == (seq, time)
    assert tr.first_at_or_after(t, times[-1] + 1) is None


@settings(max_examples=200, deadline=None)
@given(
    every=st.integers(min_value=SECOND, max_value=30 * DAY),
    start=starts,
    now=starts,
    count=st.none() | st.integers(min_value=1, max_value=10**6),
)
def test_interval_first_at_or_after_matches_occurrence(
    every: int, start: int, now: int, count: int | None
) -> None:
    t = IntervalTrigger(every, start_ms=start, count=count)
    found = tr.first_at_or_after(t, now)
    if found is None:
        assert count is not None
        assert start + (count - 1) * every < now
        return
    seq, time = found
    assert time >= now
    assert time - every < now or seq == 0
    assert tr.occurrence(t, seq, None) == time
    nxt = tr.occurrence(t, seq + 1, time)
    assert nxt is None or nxt == time + every


# --- DST rules against a brute-force oracle --------------------------------------


@functools.cache
def transition_days(zone: str) -> list[date]:
    """Local dates (2020-2030) on which the zone's UTC offset changes."""
    z = ZoneInfo(zone)
    days = []
    day = date(2020, 1, 1)
    while day < date(2031, 1, 1):
        noon = datetime(day.year, day.month, day.day, 12, tzinfo=z)
        if noon.utcoffset() != (noon - timedelta(days=1)).utcoffset():
            days.append(day)  # the change happened since noon the day before
        day += timedelta(days=1)
    return days


def exists(wall: datetime, zone: ZoneInfo) -> bool:
    aware = wall.replace(tzinfo=zone, fold=0)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def oracle_fixed(minutes: list[int], hours: list[int], zone: str, lo: int, hi: int) -> list[int]:
    """Debian rule for fixed times: wall clock; a missing time fires at the first real
    minute after it, a repeated one at its first instance."""
    z = ZoneInfo(zone)
    found = set()
    first = local(lo, zone).date() - timedelta(days=1)
    for offset in range((hi - lo) // DAY + 3):
        day = first + timedelta(days=offset)
        for h in hours:
            for m in minutes:
                wall = datetime(day.year, day.month, day.day, h, m)
                while not exists(wall, z):
                    wall += timedelta(minutes=1)
                ms = (wall.replace(tzinfo=z, fold=0) - EPOCH) // timedelta(milliseconds=1)
                if lo <= ms < hi:
                    found.add(ms)
    return sorted(found)


def oracle_wildcard(minutes: list[int], hours: list[int], zone: str, lo: int, hi: int) -> list[int]:
    """Real time: every instant whose local wall time matches, minute by minute."""
    out = []
    t = -(-lo // MINUTE) * MINUTE
    while t < hi:
        wall = local(t, zone)
        if wall.minute in minutes and wall.hour in hours:
            out.append(t)
        t += MINUTE
    return out


DST_ZONES = [
    NY,
    LONDON,
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Beirut",
    "America/Havana",
]
minute_sets = st.lists(st.integers(0, 59), min_size=1, max_size=3, unique=True).map(sorted)


def dst_window(zone: str, pick: int, shift: int) -> tuple[int, int]:
    days = transition_days(zone)
    day = days[pick % len(days)] + timedelta(days=shift)
    lo = at(zone, day.year, day.month, day.day)
    return lo, lo + 3 * DAY


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(DST_ZONES),
    st.integers(0, 10**6),
    st.integers(-1, 0),
    minute_sets,
    st.lists(st.integers(0, 23), min_size=1, max_size=2, unique=True).map(sorted),
)
def test_fixed_time_jobs_follow_the_debian_rule(
    zone: str, pick: int, shift: int, minutes: list[int], hours: list[int]
) -> None:
    lo, hi = dst_window(zone, pick, shift)
    expr = f"{','.join(map(str, minutes))} {','.join(map(str, hours))} * * *"
    assert cron_between(expr, zone, lo, hi) == oracle_fixed(minutes, hours, zone, lo, hi)


hour_wildcard = minute_sets.map(lambda ms: (",".join(map(str, ms)) + " *", ms, list(range(24))))
minute_wildcard = st.tuples(
    st.sampled_from([1, 5, 7, 15, 20, 30]),
    st.lists(st.integers(0, 23), min_size=1, max_size=3, unique=True).map(sorted),
).map(lambda kh: (f"*/{kh[0]} {','.join(map(str, kh[1]))}", list(range(0, 60, kh[0])), kh[1]))


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(DST_ZONES),
    st.integers(0, 10**6),
    st.integers(-1, 0),
    hour_wildcard | minute_wildcard,
)
def test_wildcard_hour_jobs_follow_real_time(
    zone: str, pick: int, shift: int, fields: tuple[str, list[int], list[int]]
) -> None:
    lo, hi = dst_window(zone, pick, shift)
    minute_hour, minutes, hours = fields
    expected = oracle_wildcard(minutes, hours, zone, lo, hi)
    assert cron_between(f"{minute_hour} * * *", zone, lo, hi) == expected
