"""Triggers in words, and the dashboard's session and CSRF tokens."""

from __future__ import annotations

import pytest

from clockwork_svc.dashboard import words
from clockwork_svc.dashboard.session import Csrf, Session
from clockwork_svc.domain import triggers

T = 1_800_000_000_000  # 2027-01-15 08:00:00 UTC


@pytest.mark.parametrize(
    ("trigger", "text"),
    [
        (triggers.OnceTrigger(T), "once at 2027-01-15 08:00:00 UTC"),
        (triggers.IntervalTrigger(300_000, count=10), "every 5 minutes, 10 times"),
        (triggers.IntervalTrigger(1_000), "every 1 second"),
        (triggers.IntervalTrigger(1_500, end_ms=T), "every 1500 ms, until 2027-01-15 08:00:00 UTC"),
        (
            triggers.CronTrigger("0 9 * * 1-5", "Europe/Paris"),
            "At 09:00, Monday through Friday (Europe/Paris)",
        ),
        (triggers.CronTrigger("*/5 * * * *"), "Every 5 minutes (UTC)"),
    ],
)
def test_a_trigger_in_words(trigger: triggers.Trigger, text: str) -> None:
    assert words.trigger(trigger) == text


def test_csrf_tokens_are_per_session_and_checked_in_constant_time() -> None:
    csrf, other_process = Csrf(), Csrf()
    acme, globex = Session("acme-token-0123456789", ""), Session("globex-token-0123456789", "")
    # Keyed by the session's token: any api replica checks it.
    assert csrf.token(acme) == other_process.token(acme) != csrf.token(globex)
    assert csrf.valid(acme, csrf.token(acme))
    assert not csrf.valid(acme, csrf.token(globex))
    assert not csrf.valid(acme, "")
    # Without a token (a server without auth), keyed by this process's secret.
    dev = Session("", "acme")
    assert csrf.valid(dev, csrf.token(dev)) and not other_process.valid(dev, csrf.token(dev))
    assert dev.metadata() == (("clockwork-tenant", "acme"),)
    assert acme.metadata() == (("authorization", "Bearer acme-token-0123456789"),)
    assert not Session("", "").signed_in


def test_shards_as_ranges() -> None:
    assert words.ranges([10, 0, 1, 2, 3, 8, 11, 12]) == "0-3, 8, 10-12"
    assert words.ranges([]) == ""
