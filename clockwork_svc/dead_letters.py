"""Dead letters: listing them, and redriving them (delivering again, now, with fresh
attempts and the same delivery id)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from clockwork_svc.abc import Clock, Store
from clockwork_svc.domain import planning
from clockwork_svc.domain.model import (
    DeadLetter,
    Firing,
    RedriveResult,
    Schedule,
    ScheduleState,
)
from clockwork_svc.errors import InvalidArgument

DEFAULT_LOOKBACK_MS = 7 * 86_400_000
MAX_RANGE_MS = 31 * 86_400_000
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Range:
    since_ms: int
    until_ms: int
    key: str = ""


class DeadLetters:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        on_new_firing: Callable[[Firing], None] = lambda firing: None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_new_firing = on_new_firing

    def range(self, since_ms: int | None, until_ms: int | None, key: str = "") -> Range:
        """Resolve defaults (the last 7 days) and check the bounds, naming the field."""
        now = self._clock.now_ms()
        until = until_ms if until_ms is not None else now + 1
        since = since_ms if since_ms is not None else until - DEFAULT_LOOKBACK_MS
        if since >= until:
            raise InvalidArgument("range.since", "must be before range.until")
        if until - since > MAX_RANGE_MS:
            raise InvalidArgument("range", "at most 31 days (dead letters are kept 30 days)")
        return Range(since, until, key)

    async def list(
        self, tenant: str, window: Range, after: tuple[int, str] | None, limit: int
    ) -> list[DeadLetter]:
        found: list[DeadLetter] = []
        while len(found) < limit:
            page = await self._store.list_dead_letters(
                tenant, window.since_ms, window.until_ms, after, _PAGE
            )
            found += [d for d in page if not window.key or d.schedule_key == window.key]
            if len(page) < _PAGE:
                break
            after = page[-1].sort_key
        return found[:limit]

    async def redrive(
        self, tenant: str, window: Range, firing_ids: Collection[str], again: bool
    ) -> RedriveResult:
        redriven = skipped = 0
        schedules: dict[str, Schedule | None] = {}
        after: tuple[int, str] | None = None
        wanted = set(firing_ids)
        while True:
            page = await self._store.list_dead_letters(
                tenant, window.since_ms, window.until_ms, after, _PAGE
            )
            for letter in page:
                if (window.key and letter.schedule_key != window.key) or (
                    wanted and letter.firing_id not in wanted
                ):
                    continue
                if letter.schedule_key not in schedules:
                    schedules[letter.schedule_key] = await self._store.get_schedule(
                        tenant, letter.schedule_key
                    )
                if await self._redrive_one(schedules[letter.schedule_key], letter, again):
                    redriven += 1
                else:
                    skipped += 1
            if len(page) < _PAGE:
                return RedriveResult(redriven, skipped)
            after = page[-1].sort_key

    async def _redrive_one(
        self, schedule: Schedule | None, letter: DeadLetter, again: bool
    ) -> bool:
        if letter.redriven_ms is not None and not again:
            return False
        if (
            schedule is None
            or schedule.id != letter.schedule_id
            or schedule.state not in (ScheduleState.ACTIVE, ScheduleState.COMPLETED)
        ):
            return False
        now = self._clock.now_ms()
        firing = planning.redrive_firing(schedule, letter, now)
        await self._store.put_firings([firing])
        await self._store.mark_redriven(letter, now)
        self._on_new_firing(firing)
        return True
