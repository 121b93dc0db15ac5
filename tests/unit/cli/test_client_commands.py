"""The client commands (`schedule`, `executions`, `dlq`, `tenant`, `cluster status`):
the connection settings and the call each makes, with the client stubbed out."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.cli import main, schedules
from clockwork_svc.client import ClientSettings
from clockwork_svc.coordination.etcd import ClusterView
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import BulkAction, ScheduleQuery, ScheduleState
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    OverlapPolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
)
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits
from clockwork_svc.settings import EtcdSecurity, EtcdSettings

Call = tuple[ClientSettings, str, tuple[Any, ...]]
NEW_YEAR_2030_MS = 1_893_456_000_000


class Called(Exception):
    """Ends a command at its one client call."""


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    made: list[Call] = []

    class Client:
        def __init__(self, settings: ClientSettings) -> None:
            self.settings = settings

        async def __aenter__(self) -> Client:
            return self

        async def __aexit__(
            self,
            kind: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> None:
            return None

        def __getattr__(self, method: str) -> Any:
            async def call(*args: Any, **kwargs: Any) -> None:
                made.append((self.settings, method, args))
                raise Called

            return call

    monkeypatch.setattr(schedules, "ClockworkClient", Client)
    return made


def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
    return CliRunner().invoke(main.cli, list(args), env=env, input=input)


def call_of(calls: list[Call], *args: str, env: dict[str, str] | None = None) -> Call:
    result = invoke(*args, env=env)
    assert isinstance(result.exception, Called), result.output
    [call] = calls
    return call


@pytest.mark.parametrize(
    ("args", "method", "call_args"),
    [
        (["schedule", "get", "k"], "describe", ("k", 10, 10)),
        (["schedule", "get", "k", "--upcoming", "3", "--executions", "0"], "describe", ("k", 3, 0)),
        (["schedule", "trigger", "k"], "trigger", ("k", None, "")),
        (
            ["schedule", "backfill", "k", "--from", "2030-01-01T00:00:00Z", "--to", "2030-01-02"],
            "backfill",
            ("k", NEW_YEAR_2030_MS, NEW_YEAR_2030_MS + 86_400_000),
        ),
        (
            ["schedule", "trigger", "k", "--payload", "x", "--request-id", "r1"],
            "trigger",
            ("k", b"x", "r1"),
        ),
        (["schedule", "list", "--page-size", "5", "--page-token", "p"], "list", (5, "p", None)),
        (["schedule", "pause", "k"], "pause", ("k", "")),
        (["schedule", "pause", "k", "--note", "ann: migrating"], "pause", ("k", "ann: migrating")),
        (["schedule", "resume", "k"], "resume", ("k",)),
        (["schedule", "cancel", "k"], "cancel", ("k",)),
        (["executions", "list", "k"], "executions", ("k", 50, "")),
        (["tenant", "create", "n"], "create_tenant", ("n",)),
        (["tenant", "get", "n"], "get_tenant", ("n",)),
        (["tenant", "list"], "list_tenants", (100, "")),
        (
            ["tenant", "rotate-secret", "n", "--retire-previous"],
            "rotate_signing_secret",
            ("n", True),
        ),
        (["tenant", "issue-token", "n"], "issue_token", ("n",)),
        (["tenant", "revoke-tokens", "n"], "revoke_tokens", ("n",)),
        (["tenant", "pause", "n"], "pause_tenant", ("n",)),
        (["tenant", "resume", "n"], "resume_tenant", ("n",)),
    ],
)
def test_each_command_calls_the_api_with_the_default_connection(
    calls: list[Call], args: list[str], method: str, call_args: tuple[Any, ...]
) -> None:
    assert call_of(calls, *args) == (ClientSettings(), method, call_args)


def test_connection_flags_and_environment_reach_the_client_settings(
    calls: list[Call], tmp_path: Path
) -> None:
    ca, cert, key = (tmp_path / name for name in ("ca", "cert", "key"))
    for path in (ca, cert, key):
        path.write_text("")
    tls = ["--tls-ca", str(ca), "--tls-client-cert", str(cert), "--tls-client-key", str(key)]
    settings, _, _ = call_of(
        calls, "schedule", "get", "k", "--server", "s:1", "--tenant", "t", "--token", "x", *tls
    )
    assert settings == ClientSettings(
        server="s:1", tenant="t", token="x", ca_file=ca, cert_file=cert, key_file=key
    )

    calls.clear()
    env = {"CLOCKWORK_SERVER": "env:2", "CLOCKWORK_TENANT": "t", "CLOCKWORK_TOKEN": "x"}
    settings, _, _ = call_of(calls, "dlq", "list", env=env)
    assert settings == ClientSettings(server="env:2", tenant="t", token="x")

    # Tenant administration: the admin token, and no tenant.
    calls.clear()
    env = {**env, "CLOCKWORK_ADMIN_TOKEN": "admin"}
    settings, _, _ = call_of(calls, "tenant", "get", "n", "--tls-ca", str(ca), env=env)
    assert settings == ClientSettings(server="env:2", token="admin", ca_file=ca)


def test_schedule_create_and_update_send_the_spec_their_flags_describe(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls, "schedule", "create", "--key", "k", "--every", "1s", "--url", "http://x/"
    )
    every_second = ScheduleSpec(triggers.IntervalTrigger(1000), HttpTarget("http://x/"))
    assert (method, args) == ("create", ("k", every_second, {}))

    calls.clear()
    _, method, args = call_of(
        calls,
        "schedule", "update", "--key", "k", "--expected-version", "3",
        "--cron", "0 * * * *", "--tz", "Europe/Paris", "--count", "2",
        "--kafka-topic", "topic", "--header", "b=2", "--header", "a=1",
        "--payload", "p", "--max-attempts", "1", "--ordering-key", "o",
        "--pause-after-failures", "3", "--overlap", "buffer-one",
    )  # fmt: skip
    hourly = ScheduleSpec(
        trigger=triggers.CronTrigger("0 * * * *", "Europe/Paris", count=2),
        target=KafkaTarget("topic", (("a", "1"), ("b", "2"))),
        payload=b"p",
        retry=RetryPolicy(RetryKind.NONE),
        ordering_key="o",
        pause_after_failures=3,
        overlap=OverlapPolicy.BUFFER_ONE,
    )
    assert (method, args) == ("update", ("k", hourly, 3))

    calls.clear()
    _, _, (_, spec, _) = call_of(
        calls,
        "schedule", "create", "--key", "k", "--at", "2030-01-01T00:00:00Z",
        "--url", "http://x/", "--method", "put", "--timeout", "5s", "--max-attempts", "4",
    )  # fmt: skip
    assert spec == ScheduleSpec(
        trigger=triggers.OnceTrigger(1_893_456_000_000),
        target=HttpTarget("http://x/", method="PUT", timeout_ms=5000),
        retry=RetryPolicy(RetryKind.EXPONENTIAL, max_attempts=4),
    )


def test_labels_and_listing_filters(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls,
        "schedule", "create", "--key", "k", "--every", "1s", "--url", "http://x/",
        "--label", "team=payments", "--label", "env=prod",
    )  # fmt: skip
    assert method == "create" and args[2] == {"team": "payments", "env": "prod"}
    calls.clear()
    _, method, args = call_of(calls, "schedule", "label", "k", "--label", "team=search")
    assert (method, args) == ("set_labels", ("k", {"team": "search"}))
    calls.clear()
    _, method, (size, token, query) = call_of(
        calls,
        "schedule", "list", "--selector", "team=payments,env!=dev", "--prefix", "job-",
        "--state", "paused", "--state", "active",
    )  # fmt: skip
    assert (method, size, token) == ("list", 100, "")
    assert query.prefix == "job-" and query.selector.text == "team=payments,env!=dev"
    assert query.states == {ScheduleState.PAUSED, ScheduleState.ACTIVE}
    calls.clear()
    _, _, (_, _, plain) = call_of(calls, "schedule", "list")
    assert plain is None
    result = invoke("schedule", "list", "--selector", "team>x")
    assert result.exit_code == 2 and "--selector" in result.output


def test_state_commands_take_a_key_or_a_selection(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls, "schedule", "pause", "--selector", "team=payments", "--note", "n", "--dry-run"
    )
    [query] = [a for a in args if isinstance(a, ScheduleQuery)]
    assert method == "bulk" and args[0] is BulkAction.PAUSE
    assert query.selector is not None and query.selector.text == "team=payments"
    for name, action in (("resume", BulkAction.RESUME), ("cancel", BulkAction.CANCEL)):
        calls.clear()
        _, method, args = call_of(calls, "schedule", name, "--prefix", "job-")
        assert (method, args[0], args[1].prefix) == ("bulk", action, "job-")
    calls.clear()
    _, method, args = call_of(
        calls, "schedule", "trigger", "--state", "paused", "--request-id", "r1"
    )
    assert (method, args[0]) == ("bulk", BulkAction.TRIGGER)
    for bad, words in (
        (["schedule", "pause"], "give a KEY or a selection"),
        (["schedule", "pause", "k", "--prefix", "a"], "give a KEY or a selection"),
        (["schedule", "cancel", "k", "--dry-run"], "--dry-run goes with a selection"),
        (["schedule", "trigger", "--prefix", "a", "--payload", "x"], "--payload goes with"),
    ):
        result = invoke(*bad)
        assert result.exit_code == 2 and words in result.output, result.output


def test_schedule_preview_sends_the_trigger_count_and_start(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls,
        "schedule", "preview", "--cron", "30 2 * * *", "--tz", "Europe/Paris",
        "--count", "4", "--from", "2030-01-01T00:00:00Z",
    )  # fmt: skip
    assert (method, args) == (
        "preview",
        (triggers.CronTrigger("30 2 * * *", "Europe/Paris"), 4, NEW_YEAR_2030_MS),
    )
    calls.clear()
    _, method, args = call_of(calls, "schedule", "preview", "--every", "90s")
    assert (method, args) == ("preview", (triggers.IntervalTrigger(90_000), 10, None))


def test_schedule_preview_without_a_trigger_is_a_usage_error(calls: list[Call]) -> None:
    result = invoke("schedule", "preview", "--count", "3")
    assert result.exit_code == 2
    assert "give exactly one of --at, --in, --every, --cron" in result.output
    result = invoke("schedule", "preview", "--every", "1s", "--count", "101")
    assert result.exit_code == 2
    assert "--count" in result.output
    assert not calls


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://x/"], "give exactly one of --at, --in, --every, --cron"),
        (["--every", "1s", "--in", "1s", "--url", "u"], "give exactly one of --at, --in"),
        (["--every", "1s", "--tz", "UTC", "--url", "u"], "--tz goes with --cron"),
        (["--every", "1s"], "give exactly one of --url, --kafka-topic"),
        (["--every", "soon", "--url", "u"], "'soon' is not a duration"),
        (["--every", "1s", "--url", "u", "--header", "x"], "'x' is not NAME=VALUE"),
    ],
)
def test_a_bad_spec_is_a_usage_error(calls: list[Call], args: list[str], message: str) -> None:
    result = invoke("schedule", "create", "--key", "k", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert not calls


def test_dead_letter_commands_send_their_window(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls, "dlq", "list", "--since", "2030-01-01T00:00:00Z", "--key", "k", "--page-size", "7"
    )
    window = DeadLetterRange(since_ms=NEW_YEAR_2030_MS, key="k")
    assert (method, args) == ("dead_letters", (window, 7, ""))

    calls.clear()
    _, method, args = call_of(calls, "dlq", "redrive", "--firing-id", "f1", "--again")
    assert (method, args) == ("redrive", (DeadLetterRange(), ("f1",), True))

    calls.clear()
    _, method, args = call_of(calls, "dlq", "redrive", "--until", "2030-01-01T00:00:00Z")
    window = DeadLetterRange(until_ms=NEW_YEAR_2030_MS)
    assert (method, args) == ("redrive", (window, (), False))


def test_redriving_everything_asks_first(calls: list[Call]) -> None:
    result = invoke("dlq", "redrive", input="n\n")
    assert result.exit_code == 1
    assert "Redrive every dead letter of the last 7 days?" in result.output
    assert not calls
    call_of(calls, "dlq", "redrive", "--key", "k")  # a range: no question


def test_tenant_limits_and_defaults(calls: list[Call]) -> None:
    _, method, args = call_of(
        calls, "tenant", "limits", "n", "--rate", "2.5", "--burst", "3",
        "--concurrency", "4", "--drain-rate", "1",
    )  # fmt: skip
    limits = TenantLimits(rate_per_s=2.5, burst=3, max_concurrency=4, drain_rate_per_s=1.0)
    assert (method, args) == ("set_tenant_limits", ("n", limits))

    calls.clear()
    _, method, args = call_of(
        calls, "tenant", "defaults", "n", "--retry", "fixed", "--max-attempts", "3",
        "--initial-delay", "2s", "--max-delay", "5m", "--relevancy", "30m",
    )  # fmt: skip
    retry = RetryPolicy(
        kind=RetryKind.FIXED, max_attempts=3, initial_delay_ms=2_000, max_delay_ms=300_000
    )
    wanted = TenantDefaults(retry=retry, relevancy_window_ms=1_800_000)
    assert (method, args) == ("set_tenant_defaults", ("n", wanted))


def test_cluster_status_reads_the_default_etcd_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    from clockwork_svc.coordination import etcd

    asked: list[tuple[str, str, EtcdSecurity]] = []

    async def cluster_status(endpoint: str, cluster: str, security: EtcdSecurity) -> ClusterView:
        asked.append((endpoint, cluster, security))
        return ClusterView(revision=7, workers={"w": {}}, owners={0: ("w", 3)}, shard_count=2)

    monkeypatch.setattr(etcd, "cluster_status", cluster_status)
    result = invoke("cluster", "status")
    assert result.exit_code == 0, result.output
    default = EtcdSettings()
    assert asked == [(default.endpoint, default.cluster, EtcdSecurity())]
    assert "etcd revision 7, 2 shards, 1 live workers" in result.output
    assert "unowned: 1 1" in result.output
