"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.sink import RecordingSink


@pytest.fixture
async def sink() -> AsyncIterator[RecordingSink]:
    """A real HTTP callback receiver on loopback that records what it gets."""
    receiver = await RecordingSink().start()
    yield receiver
    await receiver.stop()
