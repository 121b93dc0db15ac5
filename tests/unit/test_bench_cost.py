"""bench.cost's creation rate per tenth of the creates, from the batches' completions."""

from __future__ import annotations

from bench.cost import slowest_vs_first, tenths


def test_each_tenth_gets_the_rate_between_its_marks() -> None:
    # 1,000 creates in batches of 100, the first half at 100/s, the second at 50/s.
    done = [(float(k), 100 * k) for k in range(1, 6)]
    done += [(5.0 + 2 * k, 500 + 100 * k) for k in range(1, 6)]
    rates = tenths(done, 1000)
    assert rates == [100] * 5 + [50] * 5
    assert slowest_vs_first(rates) == 0.5


def test_a_tenth_inside_the_batch_before_it_has_no_rate_of_its_own() -> None:
    # Batches of 500 over 1,000 creates: tenths 1-5 end with the first batch.
    rates = tenths([(2.0, 500), (3.0, 1000)], 1000)
    assert rates == [250, None, None, None, None, 500, None, None, None, None]
    assert slowest_vs_first(rates) == 1.0


def test_no_batches_no_rates() -> None:
    assert tenths([], 1000) == []
    assert slowest_vs_first([]) is None
