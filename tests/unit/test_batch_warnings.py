"""The driver's log lines for Cassandra's expected batch warnings are dropped, and
only those (storage/cassandra/write_batcher.py)."""

from __future__ import annotations

import logging

import pytest

from clockwork_svc.storage.cassandra.write_batcher import quiet_batch_warnings


@pytest.mark.parametrize(
    ("warning", "kept"),
    [
        ("Unlogged batch covering 21 partitions detected against table [ks.firings].", False),
        ("Batch for [ks.executions] is of size 6.1KiB, exceeding specified threshold", False),
        ("Read 5001 live rows and 12000 tombstone cells for query ...", True),
    ],
)
def test_only_the_expected_batch_warnings_are_dropped(
    warning: str, kept: bool, caplog: pytest.LogCaptureFixture
) -> None:
    quiet_batch_warnings()
    quiet_batch_warnings()  # idempotent: one filter
    driver_log = logging.getLogger("cassandra.protocol")
    assert len(driver_log.filters) == 1
    with caplog.at_level(logging.WARNING, logger="cassandra.protocol"):
        driver_log.warning("Server warning: %s", warning)
        driver_log.warning("something else: %s", warning)
    messages = [r.getMessage() for r in caplog.records]
    assert (f"Server warning: {warning}" in messages) is kept
    assert f"something else: {warning}" in messages
