"""The chart's Prometheus alerts and Grafana dashboard, checked by Prometheus itself.

The rules are those `helm template` renders from the chart (prometheusRule.enabled),
so the test reads what an operator installs. promtool checks them and runs each alert
against synthetic series (fires on its condition, only after its `for`, not without
it). Then a real Prometheus (Debian's package) scrapes a real api and two workers on
Cassandra and etcd: the shards-unowned alert fires when a worker is killed and
resolves once the survivor has taken its shards over, and every panel of the
dashboard is a query Prometheus accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from e2e.cluster import Cluster, now_ms
from e2e.sink import RecordingSink
from tests.conftest import require_stores
from tests.kubernetes.conftest import KubeTools
from tests.support.processes import free_port

LEASE_TTL = 10  # long enough that the alert fires before the takeover


def tool(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("CI") == "true" or os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
        pytest.fail(f"{name} is not installed (apt-get install prometheus)")
    pytest.skip(f"{name} is not installed")


def rendered(kube: KubeTools, *sets: str) -> list[dict[str, Any]]:
    return kube.template(
        "auth.adminToken=0123456789abcdef0123",
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
        *sets,
    )


def rule_file(kube: KubeTools, path: Path, *sets: str) -> Path:
    [rule] = [o for o in rendered(kube, *sets) if o["kind"] == "PrometheusRule"]
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def dashboard(kube: KubeTools) -> dict[str, Any]:
    [config] = [
        o
        for o in rendered(kube)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    board: dict[str, Any] = json.loads(config["data"]["clockwork.json"])
    return board


def test_rules_and_dashboard_are_off_by_default(kube: KubeTools) -> None:
    kinds = {o["kind"] for o in kube.template("auth.adminToken=0123456789abcdef0123")}
    assert "PrometheusRule" not in kinds
    assert not any(
        o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
        for o in kube.template("auth.adminToken=0123456789abcdef0123")
    )


def test_promtool_accepts_the_rules(kube: KubeTools, tmp_path: Path) -> None:
    rules = rule_file(kube, tmp_path / "rules.yml")
    checked = subprocess.run(
        [tool("promtool"), "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def _alert(labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }


def test_each_alert_fires_on_its_condition_only(kube: KubeTools, tmp_path: Path) -> None:
    rules = rule_file(kube, tmp_path / "rules.yml")
    described = {
        r["alert"]: r["annotations"]["description"]
        for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]
    }

    def fires(name: str, at: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
        return {
            "eval_time": at,
            "alertname": name,
            "exp_alerts": [_alert(labels, summary, described[name])],
        }

    def quiet(name: str, at: str) -> dict[str, Any]:
        return {"eval_time": at, "alertname": name, "exp_alerts": []}

    lag = 'clockwork_fire_lag_seconds_bucket{instance="w1",le="%s"}'
    tests = [
        {  # worker w2 stops reporting at minute 3: its 8 shards have no owner
            "interval": "1m",
            "input_series": [
                {"series": 'clockwork_shards_total{instance="w1"}', "values": "16x20"},
                {"series": 'clockwork_shards_owned{instance="w1"}', "values": "8x20"},
                {"series": 'clockwork_shards_owned{instance="w2"}', "values": "8 8 8 stale"},
            ],
            "alert_rule_test": [
                quiet("ClockworkShardsUnowned", "2m"),
                quiet("ClockworkShardsUnowned", "3m"),  # pending for its 1m
                fires(
                    "ClockworkShardsUnowned",
                    "5m",
                    {"severity": "critical"},
                    "8 shards have no live owner",
                ),
            ],
        },
        {  # every delivery starts 5-30 s late
            "interval": "1m",
            "input_series": [
                {"series": lag % "5", "values": "0x30"},
                {"series": lag % "30", "values": "0+60x30"},
                {"series": lag % "+Inf", "values": "0+60x30"},
            ],
            "alert_rule_test": [
                quiet("ClockworkFiringLagHigh", "4m"),
                fires(
                    "ClockworkFiringLagHigh",
                    "12m",
                    {"severity": "warning"},
                    "Firing lag p99 is 29.75s",
                ),
            ],
        },
        {  # tenant acme: 3 of every 4 deliveries fail for good; globex's all succeed
            "interval": "1m",
            "input_series": [
                {
                    "series": 'clockwork_firings_total{outcome="succeeded",tenant="acme"}',
                    "values": "0+1x30",
                },
                {
                    "series": 'clockwork_firings_total{outcome="failed",tenant="acme"}',
                    "values": "0+3x30",
                },
                {
                    "series": 'clockwork_firings_total{outcome="succeeded",tenant="globex"}',
                    "values": "0+10x30",
                },
            ],
            "alert_rule_test": [
                quiet("ClockworkTenantDeliveriesFailing", "5m"),
                fires(
                    "ClockworkTenantDeliveriesFailing",
                    "25m",
                    {"severity": "warning", "tenant": "acme"},
                    "Tenant acme: 75% of deliveries failing",
                ),
                fires(
                    "ClockworkDeadLettersGrowing",
                    "25m",
                    {"severity": "warning", "tenant": "acme"},
                    "Tenant acme: 45 new dead letters in 15 minutes",
                ),
            ],
        },
        {  # store errors, fencing and refusals
            "interval": "1m",
            "input_series": [
                {
                    "series": 'clockwork_store_errors_total{instance="w1",operation="admit"}',
                    "values": "0+5x70",
                },
                {"series": 'clockwork_shard_fenced_total{instance="w1"}', "values": "0+1x70"},
                {"series": 'clockwork_api_refused_total{instance="a1"}', "values": "0+60x70"},
            ],
            "alert_rule_test": [
                quiet("ClockworkStoreErrors", "3m"),
                fires(
                    "ClockworkStoreErrors",
                    "10m",
                    {"severity": "warning", "operation": "admit"},
                    "Store calls failing: admit",
                ),
                quiet("ClockworkWorkerFencedRepeatedly", "5m"),
                fires(
                    "ClockworkWorkerFencedRepeatedly",
                    "65m",
                    {"severity": "warning", "instance": "w1"},
                    "w1 was fenced 60 times in an hour",
                ),
                fires(
                    "ClockworkApiRefusingCalls",
                    "10m",
                    {"severity": "warning"},
                    "The api refuses 1 calls a second",
                ),
            ],
        },
    ]
    suite = tmp_path / "rules_test.yml"
    suite.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    ran = subprocess.run(
        [tool("promtool"), "test", "rules", str(suite)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


# --- a real Prometheus against a real cluster ------------------------------------------


class Prometheus:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def query(self, expr: str) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.url}/api/v1/query", params={"query": expr}) as r:
            body = await r.json()
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def alerts(self, name: str) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.url}/api/v1/alerts") as r:
            body = await r.json()
        return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == name]

    async def until(self, what: str, check: Any, timeout_s: float) -> float:
        """Polls `check()` until true; returns when (time.monotonic())."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await check():
                return time.monotonic()
            await asyncio.sleep(0.25)
        raise AssertionError(f"not within {timeout_s}s: {what}")


@contextlib.asynccontextmanager
async def prometheus(run_dir: Path, rules: Path, targets: list[str]) -> AsyncIterator[Prometheus]:
    port = free_port()
    config = run_dir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "clockwork", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    log = (run_dir / "prometheus.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={run_dir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=log,
        stderr=log,
    )
    try:
        async with aiohttp.ClientSession() as session:
            server = Prometheus(f"http://127.0.0.1:{port}", session)

            async def ready() -> bool:
                try:
                    async with session.get(f"{server.url}/-/ready") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await server.until("prometheus ready", ready, 30)
            yield server
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
        log.close()


@pytest.mark.cassandra
@pytest.mark.slow
async def test_a_killed_worker_fires_the_alert_until_its_shards_are_taken_over(
    kube: KubeTools, tmp_path: Path
) -> None:
    cassandra, etcd = require_stores()
    rules = rule_file(kube, tmp_path / "rules.yml", "prometheusRule.shardsUnownedFor=0s")
    board = dashboard(kube)
    cluster = Cluster(tmp_path, cassandra, etcd, shards=16, lease_ttl=LEASE_TTL)
    sink = await RecordingSink().start()
    try:
        await cluster.migrate()
        await cluster.start_api()
        worker_ops = [f"127.0.0.1:{free_port()}" for _ in range(2)]
        for address in worker_ops:
            await cluster.add_worker(ops_listen=address)
        # Balanced: the killed worker owns its half, and no handoff is still to come.
        await cluster.wait_all_owned(2, 90, balanced=True)
        async with cluster.client() as client:
            from clockwork_svc.domain import triggers
            from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec

            for n in range(5):
                spec = ScheduleSpec(triggers.OnceTrigger(now_ms()), HttpTarget(f"{sink.url}/m"))
                await client.create(f"m-{n}", spec)
        await sink.wait_for("/m", 5, timeout_s=30)

        targets = [cluster.api_ops_address, *worker_ops]
        async with prometheus(tmp_path, rules, targets) as server:

            async def all_up_and_owned() -> bool:
                up = await server.query("sum(up)")
                owned = await server.query("sum(clockwork_shards_owned)")
                return bool(up and owned) and (up[0]["value"][1], owned[0]["value"][1]) == (
                    "3",
                    "16",
                )

            await server.until("every target up, every shard owned", all_up_and_owned, 30)

            # Until the rule has been evaluated over a scrape of both workers it may
            # see half the shards owned (with `for: 0s`, firing): wait for it to be quiet.
            async def quiet() -> bool:
                return await server.alerts("ClockworkShardsUnowned") == []

            await server.until("no alert before the kill", quiet, 10)

            # Every panel of the dashboard is a query Prometheus accepts; the firings
            # panel has data.
            for panel in board["panels"]:
                for target in panel["targets"]:
                    await server.query(target["expr"].replace("$__rate_interval", "1m"))
            fired = await server.query("sum by (outcome) (clockwork_firings_total)")
            assert {r["metric"]["outcome"] for r in fired} == {"succeeded"}

            killed = time.monotonic()
            await cluster.workers[1].kill(signal.SIGKILL)

            async def firing() -> bool:
                return any(
                    a["state"] == "firing" for a in await server.alerts("ClockworkShardsUnowned")
                )

            fired_at = await server.until("the alert fires", firing, LEASE_TTL)
            await cluster.wait_all_owned(1, LEASE_TTL + 20)
            taken_over = time.monotonic()

            resolved_at = await server.until("the alert resolves", quiet, 15)
            print(
                f"alert fired {fired_at - killed:.1f}s after the kill, shards taken over after "
                f"{taken_over - killed:.1f}s, alert resolved after {resolved_at - killed:.1f}s"
            )
    finally:
        await sink.stop()
        await cluster.stop()
