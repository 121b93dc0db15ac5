"""The checker must be able to fail: it finds planted losses, duplicates, strays and
late firings; and it excuses only what the API accounts for (dead letters, expiry) or
what the misfire policy skips by design."""

from __future__ import annotations

from e2e.checker import Outcomes, Window, check, judge
from e2e.sink import HUNG, RESET, Received
from e2e.workload import Acked, Expectations, ExpectedFiring, Workload


def rx(delivery_id: str, at: int, status: int = 200) -> Received:
    return Received("/", delivery_id, "0", {}, b"", at, status)


def expect(*firings: tuple[str, int], required: bool = True, key: str = "k") -> Expectations:
    out = Expectations()
    for d, due in firings:
        out.firings[d] = ExpectedFiring(d, key, "once", due, due, required)
    return out


def test_clean_run() -> None:
    result = check({"a": 100, "b": 200}, [rx("a", 105), rx("b", 230)])
    assert (result.lost, result.duplicated, result.unexpected) == ([], {}, [])
    assert sorted(result.lag_ms) == [5, 30] and result.max_lag_ms == 30


def test_finds_lost_duplicated_and_unexpected() -> None:
    result = check({"a": 100, "b": 200, "c": 300}, [rx("a", 100), rx("a", 101), rx("x", 5)])
    assert result.lost == ["b", "c"]
    assert result.duplicated == {"a": 2}
    assert result.unexpected == ["x"]
    assert "lost=2" in result.summary() and "duplicated=1" in result.summary()


def test_only_2xx_answers_deliver_and_duplicate() -> None:
    received = [rx("a", 100, 503), rx("a", 110, RESET), rx("a", 120, HUNG), rx("b", 200, 500)]
    result = check({"a": 100, "b": 200}, [*received, rx("b", 260), rx("b", 270, 502)])
    assert result.lost == ["a"]
    assert result.duplicated == {}
    # Lag is to the first arrival, whatever it was answered.
    assert sorted(result.lag_ms) == [0, 0]


def test_judge_accounts_dead_letters_and_expiry_but_nothing_else() -> None:
    exp = expect(("a", 100), ("b", 200), ("c", 300), ("d", 400))
    received = [rx("a", 100), rx("b", 200, 503)]
    report = judge(exp, received, Outcomes(dead_lettered={"b"}, expired={"c"}))
    assert (report.delivered, report.dead_lettered, report.expired) == (1, 1, 1)
    assert report.lost == ["d"]
    # Without the API's outcomes, b and c are lost too.
    assert judge(exp, received).lost == ["b", "c", "d"]


def test_judge_optional_and_forbidden_firings() -> None:
    exp = expect(("a", 100))
    exp.firings["opt"] = ExpectedFiring("opt", "k2", "interval", 50, 50, False)
    exp.forbidden["cancelled"] = "cancelled before it was due"
    report = judge(exp, [rx("a", 101), rx("cancelled", 500), rx("ghost", 600)])
    assert report.lost == [] and report.expected == 1
    assert report.unexpected == ["cancelled", "ghost"]
    # An optional firing may be missing, or delivered.
    assert judge(exp, [rx("a", 101), rx("opt", 60)]).optional_delivered == 1


def test_judging_an_earlier_part_keeps_the_later_firings_known() -> None:
    exp = expect(("a", 100), ("b", 200), ("c", 300))
    exp.required_before(200)
    assert exp.required == {"a": 100}
    # b and c may arrive, or not: neither lost nor unexpected; a still must.
    report = judge(exp, [rx("b", 205)])
    assert (report.lost, report.unexpected, report.optional_delivered) == (["a"], [], 1)


def test_judge_duplicates_count_2xx_answers_only() -> None:
    exp = expect(("a", 100), ("b", 200))
    report = judge(exp, [rx("a", 100), rx("a", 150), rx("a", 160), rx("b", 200, 503), rx("b", 250)])
    assert report.duplicated == {"a": 3} and report.duplicates == 2
    assert report.lost == []


def test_misfire_skips_are_excused_only_behind_a_late_dispatch() -> None:
    # Occurrences every 1,000 ms; the first was dispatched at 3,500: FIRE_LATEST arms
    # 3,000 (the latest at or before 3,500), skipping 1,000 and 2,000.
    exp = Expectations()
    ids = [f"o{t}" for t in (0, 1000, 2000, 3000, 4000)]
    for d, t in zip(ids, (0, 1000, 2000, 3000, 4000), strict=True):
        exp.firings[d] = ExpectedFiring(d, "iv", "interval", t, t, True)
    exp.series["iv"] = ids
    late = [rx("o0", 3500), rx("o3000", 3510), rx("o4000", 4005)]
    report = judge(exp, late)
    assert report.lost == [] and report.skipped == 2
    # The execution start, when known, is what counts (earlier than the arrival):
    # dispatched at 1,500, it armed 1,000, which never came, so 1,000 and 2,000 are lost.
    assert judge(exp, late, Outcomes(started_ms={"o0": 1500})).lost == ["o1000", "o2000"]
    # A worker delivered o0 at 500 and died before recording it; the next owner
    # dispatched o0 again at 3,200 (recorded) and armed 3,000: 1,000 and 2,000 are
    # skipped by design, although the first arrival was on time.
    crashed = [rx("o0", 500), rx("o0", 3300), rx("o3000", 3310), rx("o4000", 4005)]
    report = judge(exp, crashed, Outcomes(started_ms={"o0": 3200}))
    assert report.lost == [] and report.skipped == 2
    # On time, nothing is excused: a missing occurrence is lost.
    on_time = [rx("o0", 5), rx("o1000", 1005), rx("o3000", 3005), rx("o4000", 4005)]
    assert judge(exp, on_time).lost == ["o2000"]


def test_lag_per_fault_window() -> None:
    exp = expect(("a", 1000), ("b", 2000), ("c", 3000), ("d", 9000))
    received = [rx("a", 1010), rx("b", 2500), rx("c", 7000)]
    report = judge(exp, received, windows=[Window("kill", 1500, 4000)])
    (w,) = report.windows
    assert (w.due, w.delivered, w.lost) == (2, 2, 0)
    assert (w.lag_p50_ms, w.lag_max_ms) == (4000, 4000)
    assert report.figures()["lag_max_ms"] == 4000 and report.lost == ["d"]
    assert "kill" in report.table() and '"lost": 1' in report.to_json()


def test_workload_is_seeded_and_expectations_follow_the_triggers() -> None:
    a = Workload(seed=3, target="http://127.0.0.1:9")
    b = Workload(seed=3, target="http://127.0.0.1:9")
    pa = a.generate(50, 1_000_000, 1_060_000)
    pb = b.generate(50, 1_000_000, 1_060_000)
    assert pa == pb and len({p.key for p in pa}) == 50
    assert {p.kind for p in a.generate(60, 0, 60_000)} == {"once", "interval", "cron"}
    interval = a.make("interval", 1_000_000, 1_020_000)
    times = interval.occurrences(1_020_000)
    every = times[1] - times[0]
    assert times == list(range(times[0], 1_020_000, every)) and times[0] < 1_000_000 + every
    cron = a.make("cron", 1_000_000, 1_200_000)
    assert all(t % 60_000 == 0 for t in cron.occurrences(1_200_000))
    # Acknowledgement: recurring occurrences before the ack are optional; cancelled
    # ones after the cancel's ack are forbidden.
    a.created = {interval.key: Acked(1_000_000, 1_000_000 + every)}
    a.schedule_ids = {interval.key: "sid"}
    exp = a.expectations(1_020_000)
    required = [f.occurrence_ms for f in exp.firings.values() if f.required]
    assert required == [t for t in times if t > 1_000_000 + every]
    a.cancelled = {interval.key: Acked(1_010_000, 1_010_050)}
    exp = a.expectations(1_020_000)
    assert len(exp.forbidden) == len([t for t in times if t > 1_010_050])
    assert all(f.occurrence_ms <= 1_010_050 for f in exp.firings.values())
    # Those due before the cancel are optional, even long before it: one still pending
    # when the cancel landed (overdue behind a killed worker) is superseded, not sent.
    assert [f for f in exp.firings.values() if f.required] == []
    assert len(exp.firings) == len([t for t in times if t <= 1_010_050])
