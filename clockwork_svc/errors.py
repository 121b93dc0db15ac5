"""Clockwork's error hierarchy.

Domain and storage code raise these; only the gRPC servicer maps them to status
codes (see clockwork_svc/server/errors.py), and only the CLI maps them to exit
codes.
"""

from __future__ import annotations


class ClockworkError(Exception):
    """Base of every error Clockwork raises on purpose."""


class InvalidArgument(ClockworkError):
    """A request field is invalid. `field` is the dotted path of the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
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


class Unavailable(ClockworkError):
    """A dependency (the store, etcd) cannot be reached; the operation may be retried."""


class StoreUnavailable(Unavailable):
    """The store cannot be reached or timed out; the operation may be retried."""
