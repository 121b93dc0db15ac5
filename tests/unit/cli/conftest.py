from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_clockwork_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands read CLOCKWORK_* variables (a test run against real servers sets
    some); these tests give each command exactly its own."""
    for name in list(os.environ):
        if name.startswith("CLOCKWORK_"):
            monkeypatch.delenv(name)
