"""Group commit for the worker's per-firing upserts.

A worker finishing hundreds of deliveries a second issues, per firing, the same few
single-row upserts (the execution, the schedule's runtime columns, `done`). Each one
sent alone costs a driver request: a future, a callback on the driver's thread, a hop
back to the event loop; on two cores that client-side cost, not Cassandra, bounds the
firing rate. `WriteBatcher` collects the upserts issued within one event-loop turn
(or, with `linger_s`, within that long after the first) and sends them as one
UNLOGGED batch: one request, one round trip. These writes follow the delivery, so a
linger of a few milliseconds adds nothing to the firing lag.

What a caller sees is unchanged: `write` returns once its statement is applied, or
raises the batch's error (every statement of a failed batch fails; they are
idempotent, so the caller's retry is safe). A caller that awaits write A before
issuing write B still has A applied first: B goes in a later batch.

Bounds: at most `max_statements` per batch and about `max_bytes` of values (below
Cassandra's `batch_size_fail_threshold`, 50 KiB by default). The batch spans
partitions, so its atomicity is not relied on (UNLOGGED makes none); the coordinator
applies each mutation as it would a single write. Cassandra answers such batches
with a warning ("Unlogged batch covering N partitions", "Batch ... exceeding
specified threshold"), which the driver would log once per batch; those two are
dropped here (`quiet_batch_warnings`): they are expected, and the server logs them
too (its `unlogged_batch_across_partitions_warn_threshold` and
`batch_size_warn_threshold` settings raise them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cassandra.query import BatchStatement, BatchType

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge
from clockwork_svc.storage.cassandra.turn_batching import EndOfTurn

DEFAULT_MAX_STATEMENTS = 128
"""Statements per batch unless configured (`--cassandra-write-batch`)."""

DEFAULT_MAX_BYTES = 24_576
"""Bytes of bound values per batch (as `counted_size` counts them) unless configured: under
Cassandra's `batch_size_fail_threshold` (50 KiB) at `DEFAULT_MAX_STATEMENTS`."""

_VALUE_OVERHEAD = 16
"""Bytes counted per bound value on top of its own length (type and length headers)."""


Statement = tuple[Any, Sequence[Any]]
"""A prepared statement and its bound parameters."""


@dataclass(slots=True)
class _Write:
    """One caller's statements: they travel in one batch and succeed or fail together."""

    statements: Sequence[Statement]
    done: asyncio.Future[None]


class _QuietBatchWarnings(logging.Filter):
    _EXPECTED = ("Unlogged batch covering", "Batch for ")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "Server warning: %s" or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not str(args[0]).startswith(self._EXPECTED)


_QUIET = _QuietBatchWarnings()


def quiet_batch_warnings() -> None:
    """Drop the driver's log lines for Cassandra's expected batch warnings (idempotent)."""
    protocol_log = logging.getLogger("cassandra.protocol")
    if _QUIET not in protocol_log.filters:
        protocol_log.addFilter(_QUIET)


def _settle(write: _Write, error: BaseException | None) -> None:
    if write.done.done():  # its caller was cancelled
        return
    if error is None:
        write.done.set_result(None)
    else:
        write.done.set_exception(error)


def counted_size(params: Sequence[Any]) -> int:
    """One statement's bound values as the byte cap counts them."""
    size = len(params) * (_VALUE_OVERHEAD + 8)
    for v in params:
        if type(v) is str or type(v) is bytes:
            size += len(v) - 8
    return size


class WriteBatcher:
    def __init__(
        self,
        session: Any,
        *,
        max_statements: int = DEFAULT_MAX_STATEMENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        linger_s: float = 0.0,
    ):
        if max_statements < 1:
            raise ValueError("max_statements must be >= 1")
        quiet_batch_warnings()
        self._session = session
        self._max_statements = max_statements
        self._max_bytes = max_bytes
        self._pending: list[_Write] = []
        self._pending_bytes = 0
        self._pending_statements = 0
        self._turn = EndOfTurn(self._flush, "cassandra-write-batch", linger_s)
        self.batches_sent = 0
        self.statements_sent = 0

    async def write(self, statement: Any, params: Sequence[Any]) -> None:
        """Apply one idempotent upsert (prepared `statement`, bound `params`)."""
        await self.write_all(((statement, params),))

    async def write_all(self, statements: Sequence[Statement]) -> None:
        """Apply a few idempotent upserts, in one batch: returns once every one is
        applied, or raises (some may be applied; the caller retries them all)."""
        if self._max_statements == 1:
            self._count(len(statements))
            for statement, params in statements:
                await bridge.execute(self._session, statement, params)
            return
        size = sum(counted_size(params) for _, params in statements)
        if self._pending and (
            self._pending_bytes + size > self._max_bytes
            or self._pending_statements + len(statements) > self._max_statements
        ):
            self._flush()
        write = _Write(statements, asyncio.get_running_loop().create_future())
        self._pending.append(write)
        self._pending_bytes += size
        self._pending_statements += len(statements)
        if self._pending_statements >= self._max_statements:
            self._flush()
        else:
            self._turn.flush_soon()
        await write.done

    def _flush(self) -> None:
        if not self._pending:
            return
        writes, self._pending, self._pending_bytes = self._pending, [], 0
        self._pending_statements = 0
        self._turn.send(self._send(writes))

    async def _send(self, writes: list[_Write]) -> None:
        statements = [s for w in writes for s in w.statements]
        self._count(len(statements))
        try:
            if len(statements) == 1:
                await bridge.execute(self._session, *statements[0])
            else:
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                batch.is_idempotent = True
                for statement, params in statements:
                    batch.add(statement, params)
                await bridge.execute(self._session, batch)
        except asyncio.CancelledError:
            for w in writes:
                w.done.cancel()
            raise
        except StoreUnavailable as exc:  # the whole request failed: so did every write
            for w in writes:
                _settle(w, exc)
            return
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who raises it
            if len(writes) == 1:
                _settle(writes[0], exc)
                return
            # Refused (a bad value, say): one write must not fail the others. Each
            # goes alone, and only the faulty one fails.
            await asyncio.gather(*(self._send([w]) for w in writes))
            return
        for w in writes:
            _settle(w, None)

    def _count(self, statements: int) -> None:
        self.batches_sent += 1
        self.statements_sent += statements

    async def drain(self) -> None:
        """Send what is pending and wait for every batch in flight."""
        self._flush()
        await self._turn.drain()
