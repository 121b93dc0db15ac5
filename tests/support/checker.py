"""Delivery checker: compares what should have been delivered with what the sink got.

- lost: expected (acknowledged and due before the end) but never received;
- duplicated: one delivery id received more than once (the sink answered 2xx each time);
- unexpected: received, but never expected (cancelled, never created, or invented).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.support.sink import Received


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
        ordered = sorted(self.lag_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0

    def summary(self) -> str:
        return (
            f"expected={self.expected} received={self.received} lost={len(self.lost)} "
            f"duplicated={sum(n - 1 for n in self.duplicated.values())} "
            f"unexpected={len(self.unexpected)} lag_p50={self.percentile_lag_ms(0.5)}ms "
            f"lag_p99={self.percentile_lag_ms(0.99)}ms lag_max={self.max_lag_ms}ms"
        )


def check(expected_due: Mapping[str, int], received: Sequence[Received]) -> CheckResult:
    """`expected_due` maps delivery id -> due time (ms)."""
    counts = Counter(r.delivery_id for r in received)
    first_seen: dict[str, int] = {}
    for r in received:
        first_seen.setdefault(r.delivery_id, r.received_ms)
    return CheckResult(
        expected=len(expected_due),
        received=len(received),
        lost=sorted(d for d in expected_due if d not in counts),
        duplicated={d: n for d, n in counts.items() if n > 1},
        unexpected=sorted(d for d in counts if d not in expected_due),
        lag_ms=[first_seen[d] - due for d, due in expected_due.items() if d in first_seen],
    )
