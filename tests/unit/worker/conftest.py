"""Every worker unit test fails if a shard scanner logged a fault it did not expect:
its retry loop keeps the scan alive, so without this check such a fault would show
only as a stall."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

SCANNER_LOGGER = "clockwork_svc.worker.shard_scanner"


@pytest.fixture(autouse=True)
def no_unexpected_scan_fault(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    faults = [
        r.getMessage()
        for r in caplog.get_records("call")
        if r.name == SCANNER_LOGGER and r.levelno >= logging.ERROR
    ]
    assert faults == [], faults
