"""`python -m clockwork_operator`: run the operator (options also from the environment)."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import click

from clockwork_operator.autoscale import ScalePolicy
from clockwork_operator.config import (
    ApiConnection,
    AutoscaleSettings,
    KopfSettings,
    OperatorConfig,
)

# Every default below is one of these settings' own.
_API = ApiConnection()
_AUTOSCALE = AutoscaleSettings()
_POLICY = ScalePolicy()
_KOPF = KopfSettings()
_CONFIG = OperatorConfig()


def _deployment(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not (namespace and name):
        raise click.BadParameter("expected NAMESPACE/NAME", param_hint="--worker-deployment")
    return namespace, name


@click.command(context_settings={"auto_envvar_prefix": "CLOCKWORK_OPERATOR"})
@click.option(
    "--server",
    envvar="CLOCKWORK_SERVER",
    default=_API.server,
    show_default=True,
    help="The Clockwork gRPC API, HOST:PORT.",
)
@click.option(
    "--admin-token",
    envvar="CLOCKWORK_ADMIN_TOKEN",
    default=_API.admin_token,
    help="Admin token: cluster load, and resources without spec.tenantSecretRef.",
)
@click.option(
    "--ca-file",
    envvar="CLOCKWORK_CA_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=_API.ca_file,
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
    default=_CONFIG.default_tenant,
    help="Tenant for resources without a Secret (default: the resource's namespace).",
)
@click.option(
    "--status-interval",
    type=click.FloatRange(1, 3600),
    default=_CONFIG.status_interval_s,
    show_default=True,
    help="Seconds between status refreshes of each resource.",
)
@click.option(
    "--peering",
    default=_KOPF.peering,
    show_default=True,
    help="Kopf peering object: one active operator among replicas.",
)
@click.option("--priority", type=int, default=_KOPF.priority, show_default=True)
@click.option(
    "--liveness",
    default=_KOPF.liveness,
    show_default=True,
    help="Liveness endpoint URL ('' to disable).",
)
@click.option(
    "--worker-deployment",
    default="",
    help="NAMESPACE/NAME of the worker Deployment to autoscale ('' disables autoscaling).",
)
@click.option(
    "--min-workers", type=click.IntRange(0, 10_000), default=_POLICY.min_replicas, show_default=True
)
@click.option(
    "--max-workers", type=click.IntRange(1, 10_000), default=_POLICY.max_replicas, show_default=True
)
@click.option(
    "--target-per-worker",
    type=click.FloatRange(0.001),
    default=_POLICY.target_per_replica,
    show_default=True,
    help="Firings per second one worker is sized for.",
)
@click.option(
    "--lag-target-ms", type=click.FloatRange(1), default=_POLICY.lag_target_ms, show_default=True
)
@click.option(
    "--hysteresis", type=click.FloatRange(0, 0.9), default=_POLICY.hysteresis, show_default=True
)
@click.option(
    "--scale-up-cooldown",
    type=click.FloatRange(0),
    default=_POLICY.scale_up_cooldown_s,
    show_default=True,
    help="Seconds after a change before scaling up again.",
)
@click.option(
    "--scale-down-cooldown",
    type=click.FloatRange(0),
    default=_POLICY.scale_down_cooldown_s,
    show_default=True,
    help="Seconds after a change before scaling down.",
)
@click.option(
    "--scale-interval",
    type=click.FloatRange(0.5),
    default=_AUTOSCALE.interval_s,
    show_default=True,
)
@click.option(
    "--lease-name",
    default=_AUTOSCALE.lease_name,
    show_default=True,
    help="Lease (in the worker Deployment's namespace) electing the one autoscaling operator.",
)
@click.option(
    "--max-concurrent-reconciles",
    type=click.IntRange(1, 10_000),
    default=_CONFIG.max_concurrent_reconciles,
    show_default=True,
    help="Reconciles against the Clockwork API at once.",
)
@click.option(
    "--api-rate",
    type=click.FloatRange(0.1),
    default=_CONFIG.api_rate_per_s,
    show_default=True,
    help="Reconciles a second against the Clockwork API (each one to three calls); "
    "status refreshes take what applies and deletes leave.",
)
@click.option("--log-level", default=_KOPF.log_level, show_default=True)
def main(
    *,
    server: str,
    admin_token: str,
    ca_file: Path | None,
    namespaces: tuple[str, ...],
    default_tenant: str,
    status_interval: float,
    peering: str,
    priority: int,
    liveness: str,
    worker_deployment: str,
    min_workers: int,
    max_workers: int,
    target_per_worker: float,
    lag_target_ms: float,
    hysteresis: float,
    scale_up_cooldown: float,
    scale_down_cooldown: float,
    scale_interval: float,
    lease_name: str,
    max_concurrent_reconciles: int,
    api_rate: float,
    log_level: str,
) -> None:
    """Reconcile ClockworkSchedule resources and autoscale the Clockwork workers."""
    from clockwork_operator import handlers

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    autoscale = AutoscaleSettings()
    if worker_deployment:
        namespace, name = _deployment(worker_deployment)
        try:
            policy = ScalePolicy(
                min_replicas=min_workers,
                max_replicas=max_workers,
                target_per_replica=target_per_worker,
                lag_target_ms=lag_target_ms,
                hysteresis=hysteresis,
                scale_up_cooldown_s=scale_up_cooldown,
                scale_down_cooldown_s=scale_down_cooldown,
            )
        except ValueError as exc:
            raise click.UsageError(f"autoscaling: {exc}") from exc
        autoscale = AutoscaleSettings(
            namespace=namespace,
            deployment=name,
            policy=policy,
            interval_s=scale_interval,
            lease_name=lease_name,
        )
    config = OperatorConfig(
        api=ApiConnection(server=server, admin_token=admin_token, ca_file=ca_file),
        autoscale=autoscale,
        default_tenant=default_tenant,
        status_interval_s=status_interval,
        identity=f"{socket.gethostname()}-{os.getpid()}",
        max_concurrent_reconciles=max_concurrent_reconciles,
        api_rate_per_s=api_rate,
    )
    handlers.run(
        config,
        namespaces=list(namespaces),
        peering_name=peering,
        priority=priority,
        liveness=liveness or None,
    )


if __name__ == "__main__":
    main()
