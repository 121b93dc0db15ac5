from __future__ import annotations

import os

import pytest

from clockwork_svc.cli import main
from clockwork_svc.settings import ProcessSettings

# What each process command would have run: its settings, and whether api and worker.
Runs = list[tuple[ProcessSettings, bool, bool]]


@pytest.fixture(autouse=True)
def _no_clockwork_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands read CLOCKWORK_* variables (a test run against real servers sets
    some); these tests give each command exactly its own."""
    for name in list(os.environ):
        if name.startswith("CLOCKWORK_"):
            monkeypatch.delenv(name)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    """The process commands record their settings here instead of running."""
    started: Runs = []

    def run(settings: ProcessSettings, *, api: bool, worker: bool) -> None:
        started.append((settings, api, worker))

    monkeypatch.setattr(main, "_run", run)
    return started
