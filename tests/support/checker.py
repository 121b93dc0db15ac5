"""The delivery checker lives in e2e/checker.py; re-exported here for the tests that
import it from tests.support."""

from __future__ import annotations

from e2e.checker import (
    CheckResult,
    Outcomes,
    Report,
    Window,
    check,
    collect_outcomes,
    judge,
)

__all__ = ["CheckResult", "Outcomes", "Report", "Window", "check", "collect_outcomes", "judge"]
