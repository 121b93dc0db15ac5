"""The operator's command line: flags and environment map onto its settings."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from clockwork_operator import handlers
from clockwork_operator.__main__ import main
from clockwork_operator.autoscale import ScalePolicy
from clockwork_operator.config import ApiConnection, AutoscaleSettings, OperatorConfig


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def run(config: OperatorConfig, **kw: Any) -> None:
        calls.append({"config": config, **kw})

    monkeypatch.setattr(handlers, "run", run)
    return calls


def test_defaults_are_the_settings_defaults(runs: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(main, [], env={})
    assert result.exit_code == 0, result.output
    (call,) = runs
    config: OperatorConfig = call["config"]
    assert config.api == ApiConnection()
    assert config.autoscale == AutoscaleSettings()
    assert not config.autoscale.enabled
    assert config.default_tenant == OperatorConfig().default_tenant
    assert config.status_interval_s == OperatorConfig().status_interval_s
    assert call == {
        "config": config,
        "namespaces": [],
        "peering_name": "clockwork",
        "priority": 0,
        "liveness": "http://0.0.0.0:8080/healthz",
    }


def test_flags_and_environment(runs: list[dict[str, Any]]) -> None:
    args = [
        "--namespace=a",
        "--namespace=b",
        "--worker-deployment=ops/clockwork-worker",
        "--min-workers=2",
        "--max-workers=7",
        "--target-per-worker=250",
        "--scale-down-cooldown=60",
        "--liveness=",
    ]
    env = {"CLOCKWORK_SERVER": "api:7070", "CLOCKWORK_OPERATOR_STATUS_INTERVAL": "5"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    (call,) = runs
    config: OperatorConfig = call["config"]
    assert config.api.server == "api:7070"
    assert config.status_interval_s == 5.0
    assert (config.autoscale.namespace, config.autoscale.deployment) == ("ops", "clockwork-worker")
    assert config.autoscale.policy == ScalePolicy(
        min_replicas=2, max_replicas=7, target_per_replica=250.0, scale_down_cooldown_s=60.0
    )
    assert call["namespaces"] == ["a", "b"]
    assert call["liveness"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker-deployment=no-slash"], "expected NAMESPACE/NAME"),
        (
            ["--worker-deployment=ops/w", "--min-workers=5", "--max-workers=2"],
            "autoscaling: need 0 <= min_replicas <= max_replicas",
        ),
    ],
)
def test_bad_autoscaling_flags_are_usage_errors(
    runs: list[dict[str, Any]], args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 2
    assert message in result.output
    assert runs == []
