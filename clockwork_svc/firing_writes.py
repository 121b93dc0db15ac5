"""Writing firings so that a worker's sweep is sure to read them (docs/architecture.md,
invariant 5): a write that returns `planning.LATE_WRITE_MS` or more after a firing's
due time is written again, due now, until a write returns in time. Used by the api
and by workers, for every firing they write."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from clockwork_svc.abc import Clock, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import Firing

log = logging.getLogger(__name__)


async def put_in_time(
    store: Store,
    clock: Clock,
    firings: Sequence[Firing],
    on_written: Callable[[Firing], None],
) -> None:
    """Write `firings`, and again those whose write came too late (`on_written` is
    called for each row written)."""
    pending = firings
    while pending:
        await store.put_firings(pending)
        for firing in pending:
            on_written(firing)
        pending = planning.late_rewrites(pending, clock.now_ms())
        if pending:
            log.warning(
                "%d firing(s) written %d ms or more after due (first: %s); written again, due now",
                len(pending),
                planning.LATE_WRITE_MS,
                pending[0].firing_id,
            )
