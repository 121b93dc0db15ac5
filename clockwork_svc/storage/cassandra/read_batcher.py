"""Coalesced point reads of schedules.

Every firing a worker dispatches starts by reading its schedule (is it still the
version the firing was written for, still active?). A worker dispatching hundreds of
firings a second would send as many single-row requests, and on two cores the
client-side cost of each request (a driver future, a hop from the driver's I/O thread
back to the event loop) is what bounds the firing rate. `ScheduleReads` collects the
reads issued within one event-loop turn (a worker's: within `linger_s` of the first;
it reads READ_AHEAD_MS before the due time, so that wait is not firing lag) and
sends, per tenant, one `WHERE tenant = ? AND part IN ? AND key IN ?` request for up
to `max_keys` keys (`rows.schedule_part` of each key).

Each caller still gets exactly its row (or None), or the request's error. A read
issued after another one's result arrived goes in a later request, so a caller never
sees an older row than one it already saw.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from clockwork_svc.storage.cassandra import bridge
from clockwork_svc.storage.cassandra.rows import schedule_part
from clockwork_svc.storage.cassandra.turn_batching import EndOfTurn

Row = dict[str, Any]


@dataclass(slots=True)
class _Group:
    """Pending reads of one tenant: key -> the futures waiting for it."""

    waiting: dict[str, list[asyncio.Future[Row | None]]] = field(default_factory=dict)


DEFAULT_MAX_KEYS = 64
"""Keys one coalesced read asks for at most (and so partitions, `rows.schedule_part`)."""


class ScheduleReads:
    def __init__(
        self,
        session: Any,
        by_keys: Any,
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        linger_s: float = 0.0,
    ) -> None:
        """`by_keys`: a prepared `SELECT ... WHERE tenant = ? AND part IN ? AND key IN ?`
        whose rows carry a `key` column; `linger_s`: how long reads are gathered (0:
        one turn)."""
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self._session = session
        self._by_keys = by_keys
        self._max_keys = max_keys
        self._pending: dict[str, _Group] = {}
        self._turn = EndOfTurn(self._flush, "cassandra-schedule-reads", linger_s)
        self.requests_sent = 0
        self.keys_read = 0

    async def get(self, tenant: str, key: str) -> Row | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Row | None] = loop.create_future()
        group = self._pending.setdefault(tenant, _Group())
        group.waiting.setdefault(key, []).append(future)
        if len(group.waiting) >= self._max_keys:
            self._turn.send(self._read(tenant, self._pending.pop(tenant)))
        else:
            self._turn.flush_soon()
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for tenant, group in pending.items():
            self._turn.send(self._read(tenant, group))

    async def _read(self, tenant: str, group: _Group) -> None:
        keys = list(group.waiting)
        self.requests_sent += 1
        self.keys_read += len(keys)
        try:
            parts = sorted({schedule_part(k) for k in keys})
            page = await bridge.execute(self._session, self._by_keys, (tenant, parts, keys))
        except asyncio.CancelledError:
            for futures in group.waiting.values():
                for f in futures:
                    f.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every caller, who raises it
            for futures in group.waiting.values():
                for f in futures:
                    if not f.done():
                        f.set_exception(exc)
            return
        found = {row["key"]: row for row in page.rows}
        for key, futures in group.waiting.items():
            for f in futures:
                if not f.done():
                    f.set_result(found.get(key))
