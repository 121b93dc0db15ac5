"""An embedded data dir made before columns were added opens, gains them, and keeps
its rows."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from clockwork_svc.domain.model import ClusterLayout, ScheduleState
from clockwork_svc.storage.sqlite import _ADDED_COLUMNS, SqliteStore
from tests.contract.test_store_contract import make_firing, make_schedule

LAYOUT = ClusterLayout(shard_count=8, bucket_ms=60_000, created_ms=1_700_000_000_000)


async def test_an_older_data_dir_gains_the_added_columns(tmp_path: Path) -> None:
    path = tmp_path / "clockwork.db"
    store = await SqliteStore.open(path, LAYOUT)
    old = make_schedule("t", "k", trace_parent="")  # made before trace_parent existed
    await store.insert_schedule(old)
    await store.put_firings([make_firing(3, 1_800_000_000_000)])
    await store.close()
    with sqlite3.connect(path) as conn:  # back to the layout before the added columns
        for table, column, _ in reversed(_ADDED_COLUMNS):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")

    store = await SqliteStore.open(path, LAYOUT)
    try:
        assert await store.get_schedule("t", "k") == old
        [firing] = await store.scan_firings(3, (0, ""), 2**62, 10)
        assert firing.payload is None and firing.ordering_key == ""
        paused = dataclasses.replace(
            old, state=ScheduleState.PAUSED, version=2, note="n", failures_in_row=2
        )
        assert await store.replace_schedule(paused, 1)
        assert await store.set_schedule_labels("t", "k", (("team", "a"),))
        assert await store.get_schedule("t", "k") == dataclasses.replace(
            paused, labels=(("team", "a"),)
        )
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        for table, column, _ in _ADDED_COLUMNS:
            assert column in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
