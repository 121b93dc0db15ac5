"""The checker must be able to fail: it finds planted losses, duplicates and strays."""

from __future__ import annotations

from tests.support.checker import check
from tests.support.sink import Received


def rx(delivery_id: str, at: int) -> Received:
    return Received("/", delivery_id, "0", {}, b"", at)


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
