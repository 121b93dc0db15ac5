from __future__ import annotations

import random

import pytest

from clockwork_svc.coordination.assignment import fair_target, plan


def converge(workers: list[str], owners: dict[int, str], shards: int) -> dict[int, str]:
    """Run every worker's plan until nothing changes (releases free shards)."""
    for _ in range(50):
        changed = False
        for w in workers:
            p = plan(w, workers, owners, shards)
            for s in p.release:
                del owners[s]
                changed = True
            for s in p.acquire:
                if s not in owners:
                    owners[s] = w
                    changed = True
        if not changed:
            return owners
    raise AssertionError("did not converge")


@pytest.mark.parametrize(("shards", "n"), [(64, 1), (64, 3), (64, 4), (7, 3), (3, 5)])
def test_targets_add_up_and_differ_by_at_most_one(shards: int, n: int) -> None:
    workers = [f"w{i}" for i in range(n)]
    targets = [fair_target(w, workers, shards) for w in workers]
    assert sum(targets) == shards
    assert max(targets) - min(targets) <= 1


def test_cluster_converges_to_full_balanced_ownership() -> None:
    workers = ["a", "b", "c"]
    owners = converge(workers, {}, 64)
    assert sorted(owners) == list(range(64))
    counts = sorted(list(owners.values()).count(w) for w in workers)
    assert counts == [21, 21, 22]


def test_a_join_moves_only_the_excess() -> None:
    owners = converge(["a", "b", "c"], {}, 64)
    before = dict(owners)
    after = converge(["a", "b", "c", "d"], dict(owners), 64)
    moved = [s for s in range(64) if before[s] != after[s]]
    assert len(moved) == 16
    assert all(after[s] == "d" for s in moved)


def test_a_departure_redistributes_only_its_shards() -> None:
    owners = converge(["a", "b", "c"], {}, 64)
    gone = {s for s, w in owners.items() if w == "c"}
    survivors = {s: w for s, w in owners.items() if w != "c"}
    after = converge(["a", "b"], dict(survivors), 64)
    assert all(after[s] == w for s, w in survivors.items())
    assert sorted(after) == list(range(64)) and gone


def test_max_moves_bounds_acquisitions() -> None:
    assert len(plan("a", ["a"], {}, 64, max_moves=5).acquire) == 5


def test_random_views_never_ask_to_acquire_owned_shards() -> None:
    rng = random.Random(7)
    for _ in range(200):
        workers = [f"w{i}" for i in range(rng.randint(1, 6))]
        owners = {s: rng.choice(workers) for s in range(32) if rng.random() < 0.5}
        me = rng.choice(workers)
        p = plan(me, workers, owners, 32)
        assert not set(p.acquire) & set(owners)
        assert all(owners[s] == me for s in p.release)
