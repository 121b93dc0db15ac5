from __future__ import annotations

from clockwork_svc.coordination.lease_guard import LeaseGuard


def test_deadline_counts_from_the_send_time_not_the_answer() -> None:
    guard = LeaseGuard(ttl_s=10, margin_s=2)
    guard.granted(at=100.0, ttl_s=10)
    guard.keepalive_sent(105.0)
    # The answer arrives late (slow network): the lease still only lasts from 105.
    guard.keepalive_acked(10)
    assert guard.valid(112.9)
    assert not guard.valid(113.0)


def test_not_valid_before_any_grant_and_after_loss() -> None:
    guard = LeaseGuard(ttl_s=10, margin_s=2)
    assert not guard.valid(0.0)
    guard.granted(at=0.0, ttl_s=10)
    assert guard.valid(1.0)
    guard.lost()
    assert not guard.valid(1.0)


def test_a_keepalive_that_times_out_leaves_the_old_deadline() -> None:
    guard = LeaseGuard(ttl_s=10, margin_s=2)
    guard.granted(at=0.0, ttl_s=10)
    guard.keepalive_sent(3.0)  # never answered
    assert guard.valid(7.9)
    assert not guard.valid(8.0)


def test_ttl_zero_answer_means_the_lease_is_gone() -> None:
    guard = LeaseGuard(ttl_s=10, margin_s=2)
    guard.granted(at=0.0, ttl_s=10)
    guard.keepalive_sent(1.0)
    guard.keepalive_acked(0)
    assert not guard.valid(1.5)


def test_paused_past_ttl_is_invalid_on_wake() -> None:
    guard = LeaseGuard(ttl_s=10, margin_s=2)
    guard.granted(at=0.0, ttl_s=10)
    assert not guard.valid(30.0)  # SIGSTOP for 30 s: nothing may be dispatched on wake
