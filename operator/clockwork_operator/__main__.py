"""`python -m clockwork_operator`: run the operator (options also from the environment)."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

import click

from clockwork_operator.autoscale import ScalePolicy
from clockwork_operator.config import ApiConnection, AutoscaleSettings, OperatorConfig


def _deployment(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not (namespace and name):
        raise click.BadParameter("expected NAMESPACE/NAME", param_hint="--worker-deployment")
    return namespace, name


@click.command(context_settings={"auto_envvar_prefix": "CLOCKWORK_OPERATOR"})
@click.option(
    "--server",
    envvar="CLOCKWORK_SERVER",
    default="127.0.0.1:7070",
    show_default=True,
    help="The Clockwork gRPC API, HOST:PORT.",
)
@click.option(
    "--admin-token",
    envvar="CLOCKWORK_ADMIN_TOKEN",
    default="",
    help="Admin token: cluster load, and resources without spec.tenantSecretRef.",
)
@click.option(
    "--ca-file",
    envvar="CLOCKWORK_CA_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="CA bundle to verify the API's TLS certificate (TLS if set).",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch only these namespaces (repeatable); default: the whole cluster.",
)
@click.option(
    "--default-tenant",
    default="",
    help="Tenant for resources without a Secret (default: the resource's namespace).",
)
@click.option(
    "--status-interval",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    help="Seconds between status refreshes of each resource.",
)
@click.option(
    "--peering",
    default="clockwork",
    show_default=True,
    help="Kopf peering object: one active operator among replicas.",
)
@click.option("--priority", type=int, default=0, show_default=True)
@click.option(
    "--liveness",
    default="http://0.0.0.0:8080/healthz",
    show_default=True,
    help="Liveness endpoint URL ('' to disable).",
)
@click.option(
    "--worker-deployment",
    default="",
    help="NAMESPACE/NAME of the worker Deployment to autoscale ('' disables autoscaling).",
)
@click.option("--min-workers", type=click.IntRange(0, 10_000), default=1, show_default=True)
@click.option("--max-workers", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option(
    "--target-per-worker",
    type=click.FloatRange(0.001),
    default=500.0,
    show_default=True,
    help="Firings per second one worker is sized for.",
)
@click.option("--lag-target-ms", type=click.FloatRange(1), default=1000.0, show_default=True)
@click.option("--hysteresis", type=click.FloatRange(0, 0.9), default=0.2, show_default=True)
@click.option(
    "--scale-up-cooldown",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds after a change before scaling up again.",
)
@click.option(
    "--scale-down-cooldown",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    help="Seconds after a change before scaling down.",
)
@click.option("--scale-interval", type=click.FloatRange(0.5), default=15.0, show_default=True)
@click.option(
    "--lease-name",
    default="clockwork-autoscaler",
    show_default=True,
    help="Lease (in the worker Deployment's namespace) electing the one autoscaling operator.",
)
@click.option("--log-level", default="INFO", show_default=True)
def main(**kw: Any) -> None:
    """Reconcile ClockworkSchedule resources and autoscale the Clockwork workers."""
    from clockwork_operator import handlers

    logging.basicConfig(
        level=kw["log_level"].upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    autoscale = AutoscaleSettings()
    if kw["worker_deployment"]:
        namespace, name = _deployment(kw["worker_deployment"])
        try:
            policy = ScalePolicy(
                min_replicas=kw["min_workers"],
                max_replicas=kw["max_workers"],
                target_per_replica=kw["target_per_worker"],
                lag_target_ms=kw["lag_target_ms"],
                hysteresis=kw["hysteresis"],
                scale_up_cooldown_s=kw["scale_up_cooldown"],
                scale_down_cooldown_s=kw["scale_down_cooldown"],
            )
        except ValueError as exc:
            raise click.UsageError(f"autoscaling: {exc}") from exc
        autoscale = AutoscaleSettings(
            namespace, name, policy, kw["scale_interval"], lease_name=kw["lease_name"]
        )
    config = OperatorConfig(
        api=ApiConnection(kw["server"], kw["admin_token"], kw["ca_file"]),
        autoscale=autoscale,
        default_tenant=kw["default_tenant"],
        status_interval_s=kw["status_interval"],
        identity=f"{socket.gethostname()}-{os.getpid()}",
    )
    handlers.run(
        config,
        namespaces=list(kw["namespaces"]),
        peering_name=kw["peering"],
        priority=kw["priority"],
        liveness=kw["liveness"] or None,
    )


if __name__ == "__main__":
    main()
