"""The one mapping between Clockwork's errors and gRPC status codes.

The servicer turns a `ClockworkError` into a status (`status_of`); a client turns a
failed call's status back into the error (`error_of`, `error_from_rpc`), so callers
catch `NotFound` or `Unavailable` instead of comparing status codes.
"""

from __future__ import annotations

import re

import grpc

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
    Unauthenticated,
    Unavailable,
)

Code = grpc.StatusCode

# Most specific first: `status_of` takes the first class an error is an instance of.
_TABLE: tuple[tuple[type[ClockworkError], grpc.StatusCode], ...] = (
    (InvalidArgument, Code.INVALID_ARGUMENT),
    (NotFound, Code.NOT_FOUND),
    (AlreadyExists, Code.ALREADY_EXISTS),
    (Conflict, Code.ABORTED),
    (FailedPrecondition, Code.FAILED_PRECONDITION),
    (Unauthenticated, Code.UNAUTHENTICATED),
    (PermissionDenied, Code.PERMISSION_DENIED),
    (ResourceExhausted, Code.RESOURCE_EXHAUSTED),
    (DeadlineExceeded, Code.DEADLINE_EXCEEDED),
    (Unavailable, Code.UNAVAILABLE),
    (Cancelled, Code.CANCELLED),
    (Internal, Code.INTERNAL),
)
_ERRORS: dict[grpc.StatusCode, type[ClockworkError]] = {
    **{code: kind for kind, code in _TABLE},
    Code.UNKNOWN: Internal,  # what grpc answers for an exception the handler let through
}
_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
# "spec.cron.expression: ..." or "requests[3].spec.http.url: ...": the servicer's
# InvalidArgument message starts with the field's path.
_FIELD = re.compile(r"([A-Za-z_][\w.\[\]]*): (.*)", re.DOTALL)


def status_of(exc: ClockworkError) -> grpc.StatusCode:
    """The status code the API answers `exc` with (INTERNAL for an unlisted error)."""
    for kind, code in _TABLE:
        if isinstance(exc, kind):
            return code
    return Code.INTERNAL


def code_of(number: int) -> grpc.StatusCode:
    """The status code with this number (UNKNOWN for a number gRPC does not define)."""
    return _BY_NUMBER.get(number, Code.UNKNOWN)


def error_of(code: grpc.StatusCode, message: str) -> ClockworkError:
    """The error a call that failed with `code` and `message` stands for; `status` is set."""
    kind = _ERRORS.get(code, ClockworkError)
    error: ClockworkError
    if kind is InvalidArgument:
        named = _FIELD.fullmatch(message)
        error = InvalidArgument(*named.groups()) if named else InvalidArgument("", message)
    else:
        error = kind(message)
    error.status = code
    return error


def error_from_rpc(exc: grpc.aio.AioRpcError) -> ClockworkError:
    """The error for a failed call (raise it `from exc` to keep the call's details)."""
    return error_of(exc.code(), exc.details() or "")


# The HTTP status of a gRPC status, as Google's APIs map them (google/rpc/code.proto);
# FAILED_PRECONDITION is 409 here: the call was well formed, the schedule's state
# refused it.
_HTTP_STATUS: dict[grpc.StatusCode, int] = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.UNAUTHENTICATED: 401,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 409,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
}


def http_status_of(code: grpc.StatusCode) -> int:
    """The HTTP status the JSON API answers a call that ended with `code`."""
    return _HTTP_STATUS.get(code, 500)
