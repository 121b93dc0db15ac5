"""A cluster's nodes count as one server in the benchmarks' cost figures."""

from __future__ import annotations

from bench.resources import Usage, fold_groups


def test_a_groups_cpu_adds_up_and_its_peak_is_one_nodes() -> None:
    usage = {
        "cassandra": Usage(1.5, 900.0),
        "cassandra#2": Usage(2.0, 1100.0),
        "cassandra#3": Usage(0.5, 1000.0),
        "worker0": Usage(3.0, 90.0),
    }
    folded = fold_groups(usage)
    assert folded == {"cassandra": Usage(4.0, 1100.0), "worker0": Usage(3.0, 90.0)}
