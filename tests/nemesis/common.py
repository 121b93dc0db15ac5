"""What every nemesis test does at the end: print the checker's figures and assert
lost == 0 and unexpected == 0 (and duplicated == 0 where no fault can duplicate)."""

from __future__ import annotations

from e2e.checker import Report
from e2e.cluster import Cluster


def assert_report(name: str, report: Report, cluster: Cluster, *, duplicates: bool) -> None:
    print(f"\n[{name}] {report.summary()}\n{report.table()}")
    logs = cluster.logs()
    assert report.lost == [], f"lost {len(report.lost)}: {report.lost[:10]}\n{logs}"
    assert report.unexpected == [], f"unexpected {report.unexpected[:10]}\n{logs}"
    if not duplicates:
        assert report.duplicated == {}, f"duplicated {report.duplicated}\n{logs}"
    assert report.delivered > 0
