"""Shards of one worker poll in their own phases (worker/shard_scanner.py), so their
reads do not all reach the store in the same instant."""

from __future__ import annotations

import itertools

from clockwork_svc.worker.shard_scanner import _phase


def test_phases_spread_the_shards_of_a_worker_over_the_interval() -> None:
    for count in (8, 64, 256):
        phases = sorted(_phase(shard) for shard in range(count))
        assert all(0.0 <= p < 1.0 for p in phases)
        gaps = [b - a for a, b in itertools.pairwise(phases)]
        gaps.append(1.0 - phases[-1] + phases[0])
        # Golden-ratio spacing: no gap exceeds about 2.7x the even spacing.
        assert max(gaps) < 3.0 / count, (count, max(gaps))


def test_a_shard_keeps_its_phase() -> None:
    assert _phase(17) == _phase(17)
    assert _phase(0) == 0.0
