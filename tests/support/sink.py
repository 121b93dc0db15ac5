"""The recording HTTP callback receiver lives in e2e/sink.py; re-exported here for the
tests that import it from tests.support."""

from __future__ import annotations

from e2e.sink import HUNG, RESET, Received, RecordingSink

__all__ = ["HUNG", "RESET", "Received", "RecordingSink"]
