"""clockwork_svc/api/status.py: the one mapping between errors and status codes, read
both ways (the servicer answers with `status_of`, the client raises `error_of`)."""

from __future__ import annotations

import grpc
import pytest

from clockwork_svc.api.status import code_of, error_from_rpc, error_of, status_of
from clockwork_svc.errors import (
    AlreadyExists,
    Cancelled,
    ClockworkError,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StoreUnavailable,
    Unauthenticated,
    Unavailable,
)

Code = grpc.StatusCode

EXPECTED: list[tuple[grpc.StatusCode, type[ClockworkError]]] = [
    (Code.INVALID_ARGUMENT, InvalidArgument),
    (Code.NOT_FOUND, NotFound),
    (Code.ALREADY_EXISTS, AlreadyExists),
    (Code.ABORTED, Conflict),
    (Code.FAILED_PRECONDITION, FailedPrecondition),
    (Code.UNAUTHENTICATED, Unauthenticated),
    (Code.PERMISSION_DENIED, PermissionDenied),
    (Code.RESOURCE_EXHAUSTED, ResourceExhausted),
    (Code.DEADLINE_EXCEEDED, DeadlineExceeded),
    (Code.UNAVAILABLE, Unavailable),
    (Code.CANCELLED, Cancelled),
    (Code.INTERNAL, Internal),
    (Code.UNKNOWN, Internal),
    (Code.UNIMPLEMENTED, ClockworkError),
    (Code.OUT_OF_RANGE, ClockworkError),
    (Code.DATA_LOSS, ClockworkError),
]


@pytest.mark.parametrize(("code", "kind"), EXPECTED)
def test_each_status_raises_its_error_keeping_code_and_message(
    code: grpc.StatusCode, kind: type[ClockworkError]
) -> None:
    error = error_of(code, "the server's words")
    assert type(error) is kind
    assert error.status is code
    assert str(error) == "the server's words"


@pytest.mark.parametrize(("code", "kind"), [(c, k) for c, k in EXPECTED if k is not ClockworkError])
def test_what_the_client_raises_the_server_answers_with_the_same_code(
    code: grpc.StatusCode, kind: type[ClockworkError]
) -> None:
    expected = Code.INTERNAL if code is Code.UNKNOWN else code
    assert status_of(error_of(code, "x")) is expected


def test_the_server_maps_subclasses_to_the_most_specific_code() -> None:
    assert status_of(StoreUnavailable("store timed out")) is Code.UNAVAILABLE
    assert status_of(DeadlineExceeded("slow")) is Code.DEADLINE_EXCEEDED
    assert status_of(InvalidArgument("key", "bad")) is Code.INVALID_ARGUMENT

    class Unlisted(ClockworkError):
        pass

    assert status_of(Unlisted("?")) is Code.INTERNAL
    assert StoreUnavailable("x").status is None  # raised here, not by a call


def test_callers_can_catch_the_families() -> None:
    assert isinstance(error_of(Code.DEADLINE_EXCEEDED, ""), Unavailable)
    assert not isinstance(error_of(Code.RESOURCE_EXHAUSTED, ""), Unavailable)
    assert all(isinstance(error_of(code, ""), ClockworkError) for code in Code)


@pytest.mark.parametrize(
    ("message", "field", "rest"),
    [
        ("spec.cron.expression: must have 5 fields", "spec.cron.expression", "must have 5 fields"),
        ("requests[3].spec.http.url: not http(s)", "requests[3].spec.http.url", "not http(s)"),
        ("range.since: must be before range.until", "range.since", "must be before range.until"),
        ("request: cannot be decoded: bad utf-8", "request", "cannot be decoded: bad utf-8"),
        ("no field named here", "", "no field named here"),
        ("two words: are not a field", "", "two words: are not a field"),
        ("", "", ""),
    ],
)
def test_invalid_argument_names_the_field_when_the_message_does(
    message: str, field: str, rest: str
) -> None:
    error = error_of(Code.INVALID_ARGUMENT, message)
    assert isinstance(error, InvalidArgument)
    assert (error.field, error.message) == (field, rest)
    assert str(error) == message


def test_a_domain_invalid_argument_reads_back_as_itself() -> None:
    sent = InvalidArgument("defaults.retry.max_attempts", "at most 100")
    got = error_of(status_of(sent), str(sent))
    assert isinstance(got, InvalidArgument)
    assert (got.field, got.message) == (sent.field, sent.message)


def test_status_numbers() -> None:
    assert code_of(5) is Code.NOT_FOUND
    assert code_of(0) is Code.OK
    assert code_of(999) is Code.UNKNOWN


def test_error_from_a_failed_call() -> None:
    call = grpc.aio.AioRpcError(Code.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
    error = error_from_rpc(call)
    assert isinstance(error, NotFound) and str(error) == "gone"
    silent = grpc.aio.AioRpcError(Code.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata())
    assert str(error_from_rpc(silent)) == ""
