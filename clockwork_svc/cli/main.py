"""`clockwork` command line: process commands (dev, api, worker, schema) and the
client commands from clockwork_svc.cli.schedules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from clockwork_svc.cli import cluster, dead_letters, schedules, tenants
from clockwork_svc.cli.parsing import duration_ms, host_port
from clockwork_svc.domain.netpolicy import AddressPolicy, parse_networks
from clockwork_svc.domain.spec import Limits, is_loopback_host
from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.gc_policy import MAX_YOUNG_THRESHOLD, MIN_YOUNG_THRESHOLD, YOUNG_THRESHOLD
from clockwork_svc.observability import logging as cw_logging
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.server.grpc_server import MAX_MESSAGE_BYTES, TlsSettings
from clockwork_svc.settings import (
    DEV_SHARD_COUNT,
    ApiSettings,
    CassandraSettings,
    EtcdSettings,
    LayoutSettings,
    OpsSettings,
    ProcessSettings,
    StoreSettings,
)

_MESSAGE_OVERHEAD = 64 * 1024
"""Room in a request for everything but the payload (spec, key, headers)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="clockwork-svc")
def cli() -> None:
    """Clockwork: a distributed, durable job scheduler."""


cli.add_command(schedules.schedule)
cli.add_command(cluster.cluster)
cli.add_command(tenants.tenant)
cli.add_command(dead_letters.dlq)
cli.add_command(schedules.executions)


def _run(settings: ProcessSettings, *, api: bool, worker: bool) -> None:
    from clockwork_svc import app

    cw_logging.configure(settings.ops.log_level, settings.ops.log_json)
    try:
        import uvloop

        uvloop.run(app.serve(settings, api=api, worker=worker))
    except StoreUnavailable as exc:
        raise click.ClickException(f"store unavailable: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(str(exc)) from exc


def _ops_options(fn: Any) -> Any:
    fn = click.option(
        "--ops-listen",
        envvar="CLOCKWORK_OPS_LISTEN",
        default="127.0.0.1:9464",
        show_default=True,
        help="HOST:PORT for /metrics, /healthz, /readyz (port 0 picks a free one).",
    )(fn)
    fn = click.option(
        "--log-level", envvar="CLOCKWORK_LOG_LEVEL", default="INFO", show_default=True
    )(fn)
    fn = click.option(
        "--gc-young-threshold",
        envvar="CLOCKWORK_GC_YOUNG_THRESHOLD",
        type=click.IntRange(MIN_YOUNG_THRESHOLD, MAX_YOUNG_THRESHOLD),
        default=YOUNG_THRESHOLD,
        show_default=True,
        help="Allocations between collections of Python's youngest GC generation: lower "
        "gives shorter, more frequent pauses (a tighter lag tail), higher more throughput.",
    )(fn)
    return fn


def _api_options(fn: Any) -> Any:
    fn = click.option(
        "--listen",
        envvar="CLOCKWORK_LISTEN",
        default="127.0.0.1:7070",
        show_default=True,
        help="gRPC HOST:PORT.",
    )(fn)
    fn = click.option(
        "--admin-token",
        envvar="CLOCKWORK_ADMIN_TOKEN",
        default=None,
        help="Admin credential: tenant administration, and acting for any tenant.",
    )(fn)
    fn = click.option(
        "--api-tokens",
        envvar="CLOCKWORK_API_TOKENS",
        default="",
        help="Comma-separated TENANT:TOKEN pairs accepted by the API.",
    )(fn)
    fn = click.option(
        "--tls-cert", type=click.Path(exists=True, path_type=Path), envvar="CLOCKWORK_TLS_CERT"
    )(fn)
    fn = click.option(
        "--tls-key", type=click.Path(exists=True, path_type=Path), envvar="CLOCKWORK_TLS_KEY"
    )(fn)
    fn = click.option(
        "--tls-client-ca",
        type=click.Path(exists=True, path_type=Path),
        envvar="CLOCKWORK_TLS_CLIENT_CA",
        help="Require client certificates signed by this CA (mutual TLS).",
    )(fn)
    fn = click.option(
        "--max-payload",
        envvar="CLOCKWORK_MAX_PAYLOAD",
        default=65536,
        show_default=True,
        type=click.IntRange(1, 4 * 1024 * 1024),
        help="Largest payload accepted, in bytes.",
    )(fn)
    fn = click.option(
        "--max-message-size",
        envvar="CLOCKWORK_MAX_MESSAGE_SIZE",
        default=MAX_MESSAGE_BYTES,
        show_default=True,
        type=click.IntRange(64 * 1024, 256 * 1024 * 1024),
        help="Largest gRPC request or response, in bytes; larger requests are refused "
        "RESOURCE_EXHAUSTED before any handler runs. At least --max-payload + 64 KiB.",
    )(fn)
    return fn


def _cassandra_options(fn: Any) -> Any:
    fn = click.option(
        "--cassandra",
        envvar="CLOCKWORK_CASSANDRA",
        default="127.0.0.1:9042",
        show_default=True,
        help="Comma-separated HOST:PORT contact points.",
    )(fn)
    fn = click.option(
        "--keyspace", envvar="CLOCKWORK_KEYSPACE", default="clockwork", show_default=True
    )(fn)
    fn = click.option("--local-dc", envvar="CLOCKWORK_CASSANDRA_DC", default=None)(fn)
    fn = click.option("--cassandra-user", envvar="CLOCKWORK_CASSANDRA_USER", default=None)(fn)
    fn = click.option("--cassandra-password", envvar="CLOCKWORK_CASSANDRA_PASSWORD", default=None)(
        fn
    )
    fn = click.option(
        "--cassandra-connect-timeout",
        envvar="CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT",
        type=click.FloatRange(0, 3600),
        default=120.0,
        show_default=True,
        help="Seconds to keep retrying an unreachable cluster at start-up.",
    )(fn)
    fn = click.option(
        "--cassandra-write-batch",
        envvar="CLOCKWORK_CASSANDRA_WRITE_BATCH",
        type=click.IntRange(1, 256),
        default=128,
        show_default=True,
        help="Most per-firing upserts a worker sends as one batch request (1: each alone).",
    )(fn)
    fn = click.option(
        "--cassandra-batch-linger-ms",
        envvar="CLOCKWORK_CASSANDRA_BATCH_LINGER_MS",
        type=click.FloatRange(0, 100),
        default=20.0,
        show_default=True,
        help="How long a worker gathers per-firing upserts and read-ahead schedule reads "
        "into one request (0: one event-loop turn).",
    )(fn)
    return fn


def _targets_option(fn: Any) -> Any:
    fn = click.option(
        "--kafka",
        envvar="CLOCKWORK_KAFKA",
        default=None,
        help="Kafka bootstrap servers HOST:PORT[,...] for schedules with a Kafka target.",
    )(fn)
    return click.option(
        "--allow-private-targets",
        envvar="CLOCKWORK_ALLOW_PRIVATE_TARGETS",
        default="",
        help="CIDR[,CIDR...] of private networks callbacks may reach.",
    )(fn)


def _cassandra_settings(kw: dict[str, Any]) -> CassandraSettings:
    points = tuple(p.strip() for p in kw["cassandra"].split(",") if p.strip())
    for point in points:
        host_port(point, "--cassandra", 9042)
    return CassandraSettings(
        points,
        kw["keyspace"],
        kw["local_dc"],
        kw["cassandra_user"],
        kw["cassandra_password"],
        kw["cassandra_connect_timeout"],
        kw["cassandra_write_batch"],
        kw["cassandra_batch_linger_ms"],
    )


def _api_settings(kw: dict[str, Any], auth_required: bool) -> ApiSettings:
    try:
        auth = AuthSettings.from_pairs(
            kw["api_tokens"], enabled=True, admin_token=kw["admin_token"] or ""
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--api-tokens/--admin-token") from exc
    if not auth.has_credentials:
        if auth_required:
            raise click.UsageError(
                "no credentials: pass --admin-token (and issue tenant tokens with `clockwork "
                "tenant create`) and/or --api-tokens TENANT:TOKEN[,...]"
            )
        auth = dataclasses.replace(auth, enabled=False)
    tls = None
    if kw["tls_cert"] or kw["tls_key"]:
        if not (kw["tls_cert"] and kw["tls_key"]):
            raise click.UsageError("--tls-cert and --tls-key go together")
        tls = TlsSettings(kw["tls_cert"], kw["tls_key"], kw["tls_client_ca"])
    host_port(kw["listen"], "--listen", 7070)
    if kw["max_message_size"] < kw["max_payload"] + _MESSAGE_OVERHEAD:
        raise click.BadParameter(
            f"must be at least --max-payload + {_MESSAGE_OVERHEAD} "
            f"({kw['max_payload'] + _MESSAGE_OVERHEAD}): a largest payload must fit in a request",
            param_hint="--max-message-size",
        )
    return ApiSettings(
        listen=kw["listen"],
        auth=auth,
        tls=tls,
        limits=Limits(max_payload_bytes=kw["max_payload"]),
        max_message_bytes=kw["max_message_size"],
    )


def _ops_settings(kw: dict[str, Any]) -> OpsSettings:
    host, port = host_port(kw["ops_listen"], "--ops-listen", 9464)
    return OpsSettings(
        host=host,
        port=port,
        log_level=kw["log_level"],
        gc_young_threshold=kw["gc_young_threshold"],
    )


def _target_policy(kw: dict[str, Any], allow_loopback: bool) -> AddressPolicy:
    try:
        networks = parse_networks(kw["allow_private_targets"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--allow-private-targets") from exc
    return AddressPolicy(allow_loopback=allow_loopback, allowed_networks=networks)


def _is_loopback(listen: str) -> bool:
    host, _ = host_port(listen, "--listen", 7070)
    return is_loopback_host(host)


@cli.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".clockwork"),
    show_default=True,
    envvar="CLOCKWORK_DATA_DIR",
    help="Where the embedded store keeps its file.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 4096),
    default=DEV_SHARD_COUNT,
    show_default=True,
    help="Shard count (only when the data dir is new). Fewer than a cluster's "
    f"{LayoutSettings().shard_count} (`schema migrate --shards`): here one process owns "
    "every shard and reads each one every second, even when idle.",
)
@_api_options
@_ops_options
@_targets_option
def dev(**kw: Any) -> None:
    """Run api + worker in one process on the embedded SQLite store.

    Callbacks to loopback addresses are allowed in this mode only. Without
    --api-tokens the API runs without authentication, which is allowed only when it
    listens on loopback; the tenant then comes from the `clockwork-tenant` metadata.
    """
    loopback = _is_loopback(kw["listen"])
    settings = ProcessSettings(
        store=StoreSettings(kind="sqlite", sqlite_path=kw["data_dir"] / "clockwork.db"),
        layout=LayoutSettings(shard_count=kw["shards"]),
        api=_api_settings(kw, auth_required=not loopback),
        ops=_ops_settings(kw),
        targets=_target_policy(kw, allow_loopback=True),
        kafka=kw["kafka"],
    )
    _run(settings, api=True, worker=True)


def _etcd_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--cluster-name",
        envvar="CLOCKWORK_CLUSTER",
        default="default",
        show_default=True,
        help="Workers of one cluster share shards (etcd key prefix).",
    )(fn)
    return click.option(
        "--etcd",
        envvar="CLOCKWORK_ETCD",
        default=None,
        help="etcd HOST:PORT for shard ownership (worker) and the workers' load reports "
        "(api); without it a worker owns every shard.",
    )(fn)


@cli.command()
@_cassandra_options
@_api_options
@_ops_options
@_targets_option
@_etcd_options
def api(**kw: Any) -> None:
    """Run the stateless gRPC API against Cassandra."""
    kw.setdefault("lease_ttl", 6)
    settings = ProcessSettings(
        store=StoreSettings(kind="cassandra", cassandra=_cassandra_settings(kw)),
        api=_api_settings(kw, auth_required=not _is_loopback(kw["listen"])),
        ops=_ops_settings(kw),
        targets=_target_policy(kw, allow_loopback=False),
        etcd=_etcd_settings(kw),
    )
    _run(settings, api=True, worker=False)


@cli.command()
@_cassandra_options
@_ops_options
@_targets_option
@click.option(
    "--max-concurrent-deliveries",
    type=click.IntRange(1, 100_000),
    default=512,
    show_default=True,
    envvar="CLOCKWORK_MAX_CONCURRENT_DELIVERIES",
)
@_etcd_options
@click.option(
    "--lease-ttl",
    envvar="CLOCKWORK_LEASE_TTL",
    type=click.IntRange(2, 300),
    default=6,
    show_default=True,
    help="etcd lease TTL in seconds (failover time).",
)
def worker(**kw: Any) -> None:
    """Run a worker against Cassandra: scan due firings and deliver them."""
    from clockwork_svc.worker.worker import WorkerSettings

    settings = ProcessSettings(
        store=StoreSettings(kind="cassandra", cassandra=_cassandra_settings(kw)),
        ops=_ops_settings(kw),
        targets=_target_policy(kw, allow_loopback=False),
        worker=WorkerSettings(max_concurrent_deliveries=kw["max_concurrent_deliveries"]),
        etcd=_etcd_settings(kw),
        kafka=kw["kafka"],
    )
    _run(settings, api=False, worker=True)


def _etcd_settings(kw: dict[str, Any]) -> EtcdSettings | None:
    if not kw["etcd"]:
        return None
    host_port(kw["etcd"], "--etcd", 2379)
    ttl = kw["lease_ttl"]
    return EtcdSettings(
        endpoint=kw["etcd"],
        cluster=kw["cluster_name"],
        lease_ttl_s=ttl,
        safety_margin_s=max(1.0, ttl / 4),
    )


@cli.group()
def schema() -> None:
    """Manage the Cassandra schema."""


@schema.command()
@_cassandra_options
@click.option(
    "--replication-factor",
    type=click.IntRange(1, 9),
    default=None,
    help="SimpleStrategy replication factor (development clusters).",
)
@click.option(
    "--replication",
    default=None,
    help="NetworkTopologyStrategy as DC:RF[,DC:RF...] (production clusters).",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 65536),
    default=LayoutSettings().shard_count,
    show_default=True,
    help="Shard count, fixed at cluster creation.",
)
@click.option(
    "--bucket",
    default="60s",
    show_default=True,
    help="Firings partition width, fixed at cluster creation.",
)
def migrate(**kw: Any) -> None:
    """Create the keyspace and apply pending migrations (idempotent)."""
    from clockwork_svc.domain.model import ClusterLayout
    from clockwork_svc.storage import cassandra

    replication: dict[str, object]
    if kw["replication"]:
        replication = {"class": "NetworkTopologyStrategy"}
        for entry in kw["replication"].split(","):
            dc, _, rf = entry.partition(":")
            if not dc or not rf.isdigit():
                raise click.BadParameter(f"{entry!r} is not DC:RF", param_hint="--replication")
            replication[dc.strip()] = int(rf)
    else:
        replication = {
            "class": "SimpleStrategy",
            "replication_factor": kw["replication_factor"] or 1,
        }
    bucket = duration_ms(kw["bucket"], "--bucket")
    if bucket < 1000:
        raise click.BadParameter("must be at least 1s", param_hint="--bucket")
    cw_logging.configure("INFO")
    import time

    layout = ClusterLayout(kw["shards"], bucket, int(time.time() * 1000))
    c = _cassandra_settings(kw)
    try:
        applied = asyncio.run(
            cassandra.migrate(
                list(c.contact_points),
                c.keyspace,
                replication=replication,
                layout=layout,
                local_dc=c.local_dc,
                username=c.username,
                password=c.password,
                connect_timeout_s=c.connect_timeout_s,
            )
        )
    except StoreUnavailable as exc:
        raise click.ClickException(f"store unavailable: {exc}") from exc
    click.echo(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m}" for m in applied))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--status",
    type=click.IntRange(100, 599),
    default=200,
    show_default=True,
    help="HTTP status to answer with (try 503 to watch retries).",
)
def receive(host: str, port: int, status: int) -> None:
    """Print the callbacks Clockwork delivers (a receiver for trying things out)."""
    from clockwork_svc.devtools import receiver

    try:
        asyncio.run(receiver.serve(host, port, status, lambda line: click.echo(line)))
    except KeyboardInterrupt:
        pass


def main() -> None:
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
