"""Clockwork's error hierarchy.

Domain and storage code raise these; the gRPC servicer turns them into status codes
and the client (clockwork_svc/client.py) turns status codes back into them, both
through the one table in clockwork_svc/api/status.py; only the CLI maps them to exit
codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class ClockworkError(Exception):
    """Base of every error Clockwork raises on purpose.

    The client raises the subclass for the status of a failed call (this class itself
    for a status no subclass stands for), with `status` set to that status code and
    `str(error)` the server's message; the call's `grpc.aio.AioRpcError` is the
    `__cause__`. Errors raised in this process leave `status` None.
    """

    status: grpc.StatusCode | None = None


class InvalidArgument(ClockworkError):
    """A request field is invalid. `field` is the dotted path of the field ("" when
    the message names none)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class NotFound(ClockworkError):
    """The addressed schedule (or other object) does not exist."""


class AlreadyExists(ClockworkError):
    """A create collided with an existing object that has a different spec."""


class Conflict(ClockworkError):
    """An optimistic-concurrency check failed (the object changed meanwhile)."""


class FailedPrecondition(ClockworkError):
    """The object is in a state that does not allow the operation."""


class Unauthenticated(ClockworkError):
    """No valid credential."""


class PermissionDenied(ClockworkError):
    """The credential does not allow the operation."""


class ResourceExhausted(ClockworkError):
    """A limit was hit: the request is larger than the server accepts, or a quota ran out."""


class Unavailable(ClockworkError):
    """A dependency (the store, etcd, the API) cannot be reached; the operation may be
    retried."""


class StoreUnavailable(Unavailable):
    """The store cannot be reached or timed out; the operation may be retried."""


class StoreRefused(ClockworkError):
    """The store cannot be used with this process's settings, and retrying cannot fix
    that: the nodes refused its login or its TLS certificates, or a TLS file cannot be
    loaded. `setting` names the settings field to check, as a dotted path in
    `CassandraSettings` (`"password"`, `"tls.ca_file"`); the CLI names its flag."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class DeadlineExceeded(Unavailable):
    """The call did not finish within its deadline; the operation may be retried (every
    v1 call is idempotent)."""


class Cancelled(ClockworkError):
    """The call was cancelled under the caller (the server shut down, or the channel
    closed); it may be retried."""


class Internal(ClockworkError):
    """The server failed unexpectedly (INTERNAL or UNKNOWN)."""
