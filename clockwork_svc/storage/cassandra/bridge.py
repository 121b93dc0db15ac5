"""The asyncio bridge over the driver's `execute_async`.

The driver completes requests on its own I/O thread; its callbacks hand the result to
the event loop with `call_soon_threadsafe`. Results are fetched one page at a time
with an explicit `paging_state`: iterating a `ResultSet` past its first page fetches
the next page synchronously, which would block the loop.

Driver errors that mean "unreachable, overloaded or timed out" become
`StoreUnavailable` (cause chained); anything else (a bad query) propagates as is.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cassandra import (
    CDCWriteFailure,
    CoordinationFailure,
    OperationTimedOut,
    Timeout,
    Unauthorized,
    Unavailable,
    WriteTimeout,
    WriteType,
)
from cassandra.cluster import NoHostAvailable, ResultSet
from cassandra.connection import ConnectionBusy, ConnectionException
from cassandra.protocol import ErrorMessage, IsBootstrappingErrorMessage, OverloadedErrorMessage
from cassandra.query import PreparedStatement

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra.connecting import PROFILE_DEFAULT

T = TypeVar("T")
Row = dict[str, Any]

# Driver errors that mean "unreachable, overloaded or timed out": retrying may succeed.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    NoHostAvailable,
    OperationTimedOut,
    Unavailable,
    Timeout,  # ReadTimeout, WriteTimeout (including an unknown CAS outcome)
    CoordinationFailure,  # ReadFailure, WriteFailure
    CDCWriteFailure,
    ConnectionException,  # ConnectionShutdown, ProtocolVersionUnsupported
    ConnectionBusy,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
)


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[Row]
    paging_state: bytes | None


# Cassandra 5's "CAS operation result is unknown" (a proposal accepted by fewer than a
# quorum of replicas under contention); the driver knows no class for this code.
CAS_WRITE_UNKNOWN = 0x1700


class CasResultUnknown(StoreUnavailable):
    """A compare-and-set whose outcome is unknown: a later Paxos round may still
    complete it. Retrying the same write finds it applied or not."""


def _cas_outcome_unknown(exc: BaseException) -> bool:
    if isinstance(exc, ErrorMessage) and getattr(exc, "code", None) == CAS_WRITE_UNKNOWN:
        return True
    # A Paxos round that timed out (contention, or a replica too slow to answer) may
    # still be completed by the next round on that partition.
    return isinstance(exc, WriteTimeout) and exc.write_type == WriteType.CAS


# How Cassandra words an authorization it could not check (the roles' or permissions'
# read failed: too few replicas of system_auth up, or a timeout), as opposed to a
# permission the role does not have.
AUTHORIZATION_NOT_CHECKED = "Unable to perform authorization"


def translate(exc: BaseException) -> BaseException:
    """The exception to raise for a driver error (StoreUnavailable with the cause)."""
    if isinstance(exc, Unauthorized) and AUTHORIZATION_NOT_CHECKED in str(exc):
        mapped = StoreUnavailable(f"cassandra: permissions could not be read: {exc}")
        mapped.__cause__ = exc
        return mapped
    if _cas_outcome_unknown(exc):
        unknown = CasResultUnknown(f"cassandra: compare-and-set result unknown: {exc}")
        unknown.__cause__ = exc
        return unknown
    if isinstance(exc, UNAVAILABLE_ERRORS):
        mapped = StoreUnavailable(f"cassandra: {type(exc).__name__}: {exc}")
        mapped.__cause__ = exc
        return mapped
    return exc


def _settle_result(future: asyncio.Future[Page], page: Page) -> None:
    # The awaiting task may have been cancelled while the request was in flight.
    if not future.done():
        future.set_result(page)


def _settle_error(future: asyncio.Future[Page], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(translate(exc))


def _hand_over(loop: asyncio.AbstractEventLoop, settle: Any, *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(settle, *args)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting for this result any more


def _drop_timer(request: Any) -> None:
    """A finished request's timer (its speculative execution or its timeout, cancelled
    once a result or an error is set) calls back the request's own bound method, and
    the request holds the timer: a reference cycle that only the cyclic collector
    frees, the request's rows and future with it. Under load each young collection
    then walks every recent request. Dropping the timer lets the request be freed
    when its last reference goes (`_timer` is the driver's own attribute:
    tests/integration/test_cassandra_bridge.py checks that no request is left in a
    cycle)."""
    if request is not None:
        request._timer = None


async def execute(
    session: Any,
    statement: Any,
    params: Sequence[Any] | None = None,
    *,
    profile: Any = PROFILE_DEFAULT,
    fetch_size: int | None = None,
    paging_state: bytes | None = None,
    host: Any = None,
) -> Page:
    """Run one request and return one page of rows (and the state to fetch the next);
    with `host` (a driver `Host`), on that node only (a node-local virtual table)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Page] = loop.create_future()
    if fetch_size is not None and isinstance(statement, PreparedStatement):
        statement = statement.bind(params or ())
        statement.fetch_size = fetch_size
        params = None
    try:
        response = session.execute_async(
            statement, params, execution_profile=profile, paging_state=paging_state, host=host
        )
    except UNAVAILABLE_ERRORS as exc:
        raise translate(exc) from exc

    # The request keeps these callbacks until it is freed: holding it strongly here
    # would make each request a reference cycle (see `_drop_timer`).
    request = weakref.ref(response)

    def on_result(rows: Any) -> None:
        # Runs on a driver thread, from the request itself (so it is alive); ResultSet
        # here only wraps the page already received.
        finished = request()
        page = ResultSet(finished, rows)
        _hand_over(loop, _settle_result, future, Page(list(page.current_rows), page.paging_state))
        _drop_timer(finished)

    def on_error(exc: BaseException) -> None:
        _hand_over(loop, _settle_error, future, exc)
        _drop_timer(request())

    response.add_callbacks(on_result, on_error)
    return await future


async def pages(
    session: Any,
    statement: Any,
    params: Sequence[Any] | None = None,
    *,
    max_rows: int,
    page_size: int = 5000,
    profile: Any = PROFILE_DEFAULT,
) -> AsyncIterator[list[Row]]:
    """Pages of a query, one request (and one await) each, until `max_rows` or the end.

    Callers convert each page as it arrives, so no single step holds the loop for long.
    """
    remaining = max_rows
    paging_state: bytes | None = None
    while remaining > 0:
        page = await execute(
            session,
            statement,
            params,
            profile=profile,
            fetch_size=min(page_size, remaining),
            paging_state=paging_state,
        )
        rows = page.rows[:remaining]
        remaining -= len(rows)
        yield rows
        paging_state = page.paging_state
        if paging_state is None:
            break


async def fetch(
    session: Any,
    statement: Any,
    params: Sequence[Any] | None = None,
    *,
    max_rows: int,
    page_size: int = 5000,
    profile: Any = PROFILE_DEFAULT,
) -> list[Row]:
    """All rows of a query up to `max_rows`, following pages."""
    rows: list[Row] = []
    async for page in pages(
        session, statement, params, max_rows=max_rows, page_size=page_size, profile=profile
    ):
        rows += page
    return rows


async def first(
    session: Any,
    statement: Any,
    params: Sequence[Any] | None = None,
    *,
    profile: Any = PROFILE_DEFAULT,
) -> Row | None:
    page = await execute(session, statement, params, profile=profile)
    return page.rows[0] if page.rows else None


async def gather_bounded(aws: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Await all, at most `limit` at a time, results in order; the first error is raised
    after the others finish (none is left running or unretrieved)."""
    semaphore = asyncio.Semaphore(limit)

    async def run(aw: Awaitable[T]) -> T:
        async with semaphore:
            return await aw

    results = await asyncio.gather(*(run(aw) for aw in aws), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]
