from __future__ import annotations

import pytest

from clockwork_svc.domain.tenant import TenantLimits
from clockwork_svc.worker.tenant_gates import TenantGates, Verdict


def test_unlimited_tenants_always_go() -> None:
    gates = TenantGates()
    assert all(gates.admit("t", TenantLimits(), 0.1, 0.0).verdict is Verdict.GO for _ in range(100))


def test_rate_is_scaled_by_the_workers_share() -> None:
    gates = TenantGates()
    limits = TenantLimits(rate_per_s=100, burst=10)
    # Owning a quarter of the shards: 25/s with a burst of 2.5 (2 whole tokens now).
    verdicts = [gates.admit("t", limits, 0.25, 0.0) for _ in range(3)]
    assert [v.verdict for v in verdicts[:2]] == [Verdict.GO, Verdict.GO]
    assert verdicts[2].verdict is Verdict.WAIT
    assert verdicts[2].delay_s == pytest.approx(0.02)
    # A firing that waited for its token is not charged again.
    assert gates.admit("t", limits, 0.25, 0.02, reserved=True).verdict is Verdict.GO


def test_concurrency_share_is_at_least_one_and_frees_on_finish() -> None:
    gates = TenantGates()
    limits = TenantLimits(max_concurrency=4)
    assert gates.admit("t", limits, 0.1, 0.0).verdict is Verdict.GO
    assert gates.admit("t", limits, 0.1, 0.0).verdict is Verdict.FULL
    gates.finished("t")
    assert gates.admit("t", limits, 0.1, 0.0).verdict is Verdict.GO
    assert gates.admit("other", limits, 0.1, 0.0).verdict is Verdict.GO  # per tenant


def test_paused_tenants_are_held_and_drain_at_the_drain_rate() -> None:
    gates = TenantGates()
    assert gates.admit("t", TenantLimits(paused=True), 1.0, 0.0).verdict is Verdict.HOLD
    draining = TenantLimits(rate_per_s=100, burst=1, drain_rate_per_s=2)
    assert gates.admit("t", draining, 1.0, 0.0, draining=True).verdict is Verdict.GO
    wait = gates.admit("t", draining, 1.0, 0.0, draining=True)
    assert wait.verdict is Verdict.WAIT and wait.delay_s == pytest.approx(0.5)


def test_no_tenant_holds_more_than_the_workers_cap() -> None:
    gates = TenantGates(cap=2)
    go = [gates.admit("hog", TenantLimits(), 1.0, 0.0).verdict for _ in range(3)]
    assert go == [Verdict.GO, Verdict.GO, Verdict.FULL]
    assert gates.admit("other", TenantLimits(), 1.0, 0.0).verdict is Verdict.GO
    gates.finished("hog")
    assert gates.admit("hog", TenantLimits(), 1.0, 0.0).verdict is Verdict.GO


def test_the_lower_of_the_cap_and_the_tenants_own_limit_applies() -> None:
    gates = TenantGates(cap=3)
    generous = TenantLimits(max_concurrency=100)
    assert [gates.admit("a", generous, 1.0, 0.0).verdict for _ in range(4)][-1] is Verdict.FULL
    strict = TenantLimits(max_concurrency=1)
    assert [gates.admit("b", strict, 1.0, 0.0).verdict for _ in range(2)] == [
        Verdict.GO,
        Verdict.FULL,
    ]
