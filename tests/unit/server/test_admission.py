"""Admission control's counting and retry hint, and the client's reading of the hint."""

from __future__ import annotations

import grpc
import pytest

from clockwork_svc.client import retry_wait_s
from clockwork_svc.server.admission import MAX_HINT_MS, MIN_HINT_MS, PUSHBACK_METADATA, Admission


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(limit: int, clock: Clock, jitter: float = 0.5) -> Admission:
    return Admission(limit, monotonic=clock, jitter=lambda: jitter)


def test_admits_up_to_the_limit_and_again_once_a_call_leaves() -> None:
    gate = admission(2, Clock())
    first, second = gate.try_enter(), gate.try_enter()
    assert first is not None and second is not None
    assert gate.full and gate.try_enter() is None
    gate.leave(first)
    assert not gate.full and gate.in_flight == 1
    assert gate.try_enter() is not None


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Admission(0)


def test_the_hint_follows_the_duration_of_admitted_calls() -> None:
    clock = Clock()
    gate = admission(1, clock)
    for _ in range(200):  # calls of 400 ms each, well under one refusal per finish
        started = gate.try_enter()
        assert started is not None
        clock.now += 0.4
        gate.leave(started)
    assert 390 <= gate.refused() <= 400


def test_a_bigger_burst_is_told_to_come_back_later() -> None:
    clock = Clock()
    gate = admission(1, clock)
    # One second in which 10 calls of 10 ms finish and 2,000 are refused...
    for _ in range(10):
        started = gate.try_enter()
        assert started is not None
        clock.now += 0.01
        gate.leave(started)
    for _ in range(2000):
        gate.refused()
    clock.now += 1.0
    # ...the next refusals are told the 2,000 need 200 s at that rate: the most.
    assert gate.refused() == MAX_HINT_MS


def test_the_hint_is_jittered_and_bounded() -> None:
    clock = Clock()
    low, high = admission(1, clock, jitter=0.0), admission(1, clock, jitter=1.0)
    assert low.refused() == 50 and high.refused() == 150  # 100 ms before any call ends
    quick = admission(1, clock, jitter=0.0)
    for _ in range(200):
        started = quick.try_enter()
        assert started is not None
        quick.leave(started)  # calls of 0 ms
    assert quick.refused() == MIN_HINT_MS


def rpc_error(code: grpc.StatusCode, trailing: tuple[tuple[str, str], ...]) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), "x")


def test_the_client_retries_a_hinted_refusal_after_the_hint() -> None:
    refused = rpc_error(grpc.StatusCode.UNAVAILABLE, ((PUSHBACK_METADATA, "500"),))
    assert retry_wait_s(refused, 0.0) == pytest.approx(0.4)
    assert retry_wait_s(refused, 1.0) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("code", "trailing"),
    [
        (grpc.StatusCode.UNAVAILABLE, ()),  # server down: gRPC's retry policy had its go
        (grpc.StatusCode.UNAVAILABLE, ((PUSHBACK_METADATA, "-1"),)),  # "do not retry"
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ((PUSHBACK_METADATA, "100"),)),
        (grpc.StatusCode.INVALID_ARGUMENT, ()),
    ],
)
def test_the_client_does_not_retry_anything_else(
    code: grpc.StatusCode, trailing: tuple[tuple[str, str], ...]
) -> None:
    assert retry_wait_s(rpc_error(code, trailing), 0.5) is None
