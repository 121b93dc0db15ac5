"""`clockwork` command line: process commands (dev, api, worker, schema) and the
client commands from clockwork_svc.cli.schedules.

Every flag's default is the default of the setting it fills (clockwork_svc/settings.py),
read from `_DEFAULT`; a flag group reaches its command as one settings object
(clockwork_svc/cli/options.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from clockwork_svc.cli import (
    cassandra_access,
    cluster,
    dead_letters,
    etcd_options,
    schedules,
    tenants,
)
from clockwork_svc.cli.options import option_group
from clockwork_svc.cli.parsing import duration_ms, duration_text, etcd_endpoints, host_of, host_port
from clockwork_svc.domain.netpolicy import AddressPolicy, parse_networks
from clockwork_svc.domain.spec import Limits, is_loopback_host
from clockwork_svc.errors import StoreRefused, StoreUnavailable
from clockwork_svc.gc_policy import MAX_YOUNG_THRESHOLD, MIN_YOUNG_THRESHOLD
from clockwork_svc.observability import logging as cw_logging
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.server.grpc_server import TlsSettings
from clockwork_svc.settings import (
    DEV_HTTP_LISTEN,
    DEV_SHARD_COUNT,
    HTTP_PORT,
    ApiSettings,
    CassandraSettings,
    EtcdSecurity,
    EtcdSettings,
    LayoutSettings,
    OpsSettings,
    ProcessSettings,
    StoreSettings,
)
from clockwork_svc.worker.worker import WorkerSettings

_DEFAULT = ProcessSettings()
"""The settings as they are without flags: the flags' defaults."""
_DEFAULT_ETCD = EtcdSettings()
"""What --etcd fills in (`_DEFAULT.etcd` is None: without etcd one worker owns every shard)."""

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
    from clockwork_svc.coordination.etcd_access import EtcdAccessError

    cw_logging.configure(settings.ops.log_level, settings.ops.log_json)
    try:
        import uvloop

        uvloop.run(app.serve(settings, api=api, worker=worker))
    except StoreRefused as exc:
        raise click.ClickException(cassandra_access.refused(exc)) from exc
    except StoreUnavailable as exc:
        raise click.ClickException(f"store unavailable: {exc}") from exc
    except EtcdAccessError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(str(exc)) from exc


def _ops_settings(
    ops_listen: str,
    log_level: str,
    gc_young_threshold: int,
    gc_idle_threshold: int,
    otlp_endpoint: str | None,
) -> OpsSettings:
    host, port = host_port(ops_listen, "--ops-listen", _DEFAULT.ops.port)
    if 0 < gc_idle_threshold < MIN_YOUNG_THRESHOLD:
        raise click.BadParameter(
            f"must be 0 (off) or from {MIN_YOUNG_THRESHOLD} to {MAX_YOUNG_THRESHOLD}, "
            f"got {gc_idle_threshold}",
            param_hint="--gc-idle-threshold",
        )
    if otlp_endpoint and not otlp_endpoint.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{otlp_endpoint!r} is not an http:// or https:// URL", param_hint="--otlp-endpoint"
        )
    return OpsSettings(
        host=host,
        port=port,
        log_level=log_level,
        gc_young_threshold=gc_young_threshold,
        gc_idle_threshold=gc_idle_threshold,
        otlp_endpoint=otlp_endpoint or None,
    )


_ops_options = option_group(
    "ops",
    _ops_settings,
    click.option(
        "--ops-listen",
        envvar="CLOCKWORK_OPS_LISTEN",
        default=f"{_DEFAULT.ops.host}:{_DEFAULT.ops.port}",
        show_default=True,
        help="HOST:PORT for /metrics, /healthz, /readyz (port 0 picks a free one).",
    ),
    click.option(
        "--log-level",
        envvar="CLOCKWORK_LOG_LEVEL",
        default=_DEFAULT.ops.log_level,
        show_default=True,
    ),
    click.option(
        "--gc-young-threshold",
        envvar="CLOCKWORK_GC_YOUNG_THRESHOLD",
        type=click.IntRange(MIN_YOUNG_THRESHOLD, MAX_YOUNG_THRESHOLD),
        default=_DEFAULT.ops.gc_young_threshold,
        show_default=True,
        help="Allocations between collections of Python's youngest GC generation: lower "
        "gives shorter, more frequent pauses (a tighter lag tail), higher more throughput.",
    ),
    click.option(
        "--gc-idle-threshold",
        envvar="CLOCKWORK_GC_IDLE_THRESHOLD",
        type=click.IntRange(0, MAX_YOUNG_THRESHOLD),
        default=_DEFAULT.ops.gc_idle_threshold,
        show_default=True,
        help="A worker with nothing to send for a few milliseconds collects its youngest "
        "GC generation early, once it holds this many allocations, so the pause falls "
        "between deliveries (0: off; collections then run at --gc-young-threshold only).",
    ),
    click.option(
        "--otlp-endpoint",
        envvar="CLOCKWORK_OTLP_ENDPOINT",
        default=None,
        help="OTLP/HTTP collector URL (e.g. http://otel-collector:4318): export spans of "
        "api calls and deliveries. Off by default; callbacks carry `traceparent` either way.",
    ),
)


def _api_settings(
    listen: str,
    admin_token: str | None,
    api_tokens: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    max_payload: int,
    max_message_size: int,
    max_in_flight: int,
) -> ApiSettings:
    """Without credentials the API runs unauthenticated, which only loopback allows."""
    loopback = is_loopback_host(host_of(listen, "--listen"))
    try:
        auth = AuthSettings.from_pairs(api_tokens, enabled=True, admin_token=admin_token or "")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--api-tokens/--admin-token") from exc
    if not auth.has_credentials:
        if not loopback:
            raise click.UsageError(
                "no credentials: pass --admin-token (and issue tenant tokens with `clockwork "
                "tenant create`) and/or --api-tokens TENANT:TOKEN[,...]"
            )
        auth = dataclasses.replace(auth, enabled=False)
    tls = None
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise click.UsageError("--tls-cert and --tls-key go together")
        tls = TlsSettings(cert_file=tls_cert, key_file=tls_key, client_ca_file=tls_client_ca)
    if max_message_size < max_payload + _MESSAGE_OVERHEAD:
        raise click.BadParameter(
            f"must be at least --max-payload + {_MESSAGE_OVERHEAD} "
            f"({max_payload + _MESSAGE_OVERHEAD}): a largest payload must fit in a request",
            param_hint="--max-message-size",
        )
    return ApiSettings(
        listen=listen,
        auth=auth,
        tls=tls,
        limits=Limits(max_payload_bytes=max_payload),
        max_message_bytes=max_message_size,
        max_in_flight=max_in_flight,
    )


_api_options = option_group(
    "api",
    _api_settings,
    click.option(
        "--listen",
        envvar="CLOCKWORK_LISTEN",
        default=_DEFAULT.api.listen,
        show_default=True,
        help="gRPC HOST:PORT.",
    ),
    click.option(
        "--admin-token",
        envvar="CLOCKWORK_ADMIN_TOKEN",
        default=None,
        help="Admin credential: tenant administration, and acting for any tenant.",
    ),
    click.option(
        "--api-tokens",
        envvar="CLOCKWORK_API_TOKENS",
        default="",
        help="Comma-separated TENANT:TOKEN pairs accepted by the API.",
    ),
    click.option(
        "--tls-cert",
        type=click.Path(exists=True, path_type=Path),
        envvar="CLOCKWORK_TLS_CERT",
        default=None,
    ),
    click.option(
        "--tls-key",
        type=click.Path(exists=True, path_type=Path),
        envvar="CLOCKWORK_TLS_KEY",
        default=None,
    ),
    click.option(
        "--tls-client-ca",
        type=click.Path(exists=True, path_type=Path),
        envvar="CLOCKWORK_TLS_CLIENT_CA",
        default=None,
        help="Require client certificates signed by this CA (mutual TLS).",
    ),
    click.option(
        "--max-payload",
        envvar="CLOCKWORK_MAX_PAYLOAD",
        default=_DEFAULT.api.limits.max_payload_bytes,
        show_default=True,
        type=click.IntRange(1, 4 * 1024 * 1024),
        help="Largest payload accepted, in bytes.",
    ),
    click.option(
        "--max-message-size",
        envvar="CLOCKWORK_MAX_MESSAGE_SIZE",
        default=_DEFAULT.api.max_message_bytes,
        show_default=True,
        type=click.IntRange(64 * 1024, 256 * 1024 * 1024),
        help="Largest gRPC request or response, in bytes; larger requests are refused "
        "RESOURCE_EXHAUSTED before any handler runs. At least --max-payload + 64 KiB.",
    ),
    click.option(
        "--max-in-flight",
        envvar="CLOCKWORK_MAX_IN_FLIGHT",
        default=_DEFAULT.api.max_in_flight,
        show_default=True,
        type=click.IntRange(1, 100_000),
        help="Calls the API handles at once; above it, calls are refused UNAVAILABLE at "
        "once with a retry hint (grpc-retry-pushback-ms), which clients retry. Bounds "
        "the API's memory and its admitted calls' latency under a burst.",
    ),
)


def _http_option(default: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--http-listen",
        envvar="CLOCKWORK_HTTP_LISTEN",
        default=default,
        show_default=True,
        help="HOST:PORT of the HTTP/JSON API (same tokens and errors as gRPC; OpenAPI at "
        "/v1/openapi.json); `off` for none.",
    )


def _with_http(api: ApiSettings, http_listen: str | None) -> ApiSettings:
    if not http_listen or http_listen == "off":
        return api
    host, port = host_port(http_listen, "--http-listen", HTTP_PORT)
    if not api.auth.enabled and not is_loopback_host(host):
        raise click.UsageError(
            "no credentials: the HTTP API may run without them only on loopback; pass "
            "--admin-token and/or --api-tokens"
        )
    return dataclasses.replace(api, http_listen=(host, port))


def _cassandra_settings(
    cassandra: str,
    keyspace: str,
    local_dc: str | None,
    cassandra_access: cassandra_access.Access,
    cassandra_connect_timeout: float,
    cassandra_write_batch: int,
    cassandra_batch_linger_ms: float,
    cassandra_speculative_delay_ms: float,
) -> CassandraSettings:
    points = tuple(p.strip() for p in cassandra.split(",") if p.strip())
    for point in points:
        host_of(point, "--cassandra")
    return CassandraSettings(
        contact_points=points,
        keyspace=keyspace,
        local_dc=local_dc,
        username=cassandra_access.username,
        password=cassandra_access.password,
        tls=cassandra_access.tls,
        connect_timeout_s=cassandra_connect_timeout,
        write_batch=cassandra_write_batch,
        batch_linger_ms=cassandra_batch_linger_ms,
        speculative_delay_ms=cassandra_speculative_delay_ms,
    )


_CASSANDRA = _DEFAULT.store.cassandra
_cassandra_options = option_group(
    "cassandra",
    _cassandra_settings,
    click.option(
        "--cassandra",
        envvar="CLOCKWORK_CASSANDRA",
        default=",".join(_CASSANDRA.contact_points),
        show_default=True,
        help="Comma-separated HOST:PORT contact points.",
    ),
    click.option(
        "--keyspace", envvar="CLOCKWORK_KEYSPACE", default=_CASSANDRA.keyspace, show_default=True
    ),
    click.option("--local-dc", envvar="CLOCKWORK_CASSANDRA_DC", default=_CASSANDRA.local_dc),
    cassandra_access.access_options,
    click.option(
        "--cassandra-connect-timeout",
        envvar="CLOCKWORK_CASSANDRA_CONNECT_TIMEOUT",
        type=click.FloatRange(0, 3600),
        default=_CASSANDRA.connect_timeout_s,
        show_default=True,
        help="Seconds to keep retrying an unreachable cluster at start-up (a refused "
        "login or certificate ends start-up at once).",
    ),
    click.option(
        "--cassandra-write-batch",
        envvar="CLOCKWORK_CASSANDRA_WRITE_BATCH",
        type=click.IntRange(1, 256),
        default=_CASSANDRA.write_batch,
        show_default=True,
        help="Most per-firing upserts a worker sends as one batch request (1: each alone).",
    ),
    click.option(
        "--cassandra-batch-linger-ms",
        envvar="CLOCKWORK_CASSANDRA_BATCH_LINGER_MS",
        type=click.FloatRange(0, 100),
        default=_CASSANDRA.batch_linger_ms,
        show_default=True,
        help="How long a worker gathers per-firing upserts and read-ahead schedule reads "
        "into one request (0: one event-loop turn).",
    ),
    click.option(
        "--cassandra-speculative-delay-ms",
        envvar="CLOCKWORK_CASSANDRA_SPECULATIVE_DELAY_MS",
        type=click.FloatRange(0, 10_000),
        default=_CASSANDRA.speculative_delay_ms,
        show_default=True,
        help="Send a read or idempotent write not answered within this time to another "
        "node too; the first answer wins (0: never).",
    ),
)


def _targets_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--kafka",
        envvar="CLOCKWORK_KAFKA",
        default=_DEFAULT.kafka,
        help="Kafka bootstrap servers HOST:PORT[,...] for schedules with a Kafka target.",
    )(fn)
    return click.option(
        "--allow-private-targets",
        envvar="CLOCKWORK_ALLOW_PRIVATE_TARGETS",
        default="",
        help="CIDR[,CIDR...] of private networks callbacks may reach.",
    )(fn)


def _target_policy(allow_private_targets: str, *, allow_loopback: bool) -> AddressPolicy:
    try:
        networks = parse_networks(allow_private_targets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--allow-private-targets") from exc
    return AddressPolicy(allow_loopback=allow_loopback, allowed_networks=networks)


@cli.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=_DEFAULT.store.sqlite_path.parent,
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
    f"{_DEFAULT.layout.shard_count} (`schema migrate --shards`): here one process owns "
    "every shard and reads each one every second, even when idle.",
)
@_api_options
@_http_option(DEV_HTTP_LISTEN)
@_ops_options
@_targets_option
def dev(
    data_dir: Path,
    shards: int,
    api: ApiSettings,
    http_listen: str | None,
    ops: OpsSettings,
    kafka: str | None,
    allow_private_targets: str,
) -> None:
    """Run api + worker in one process on the embedded SQLite store.

    Callbacks to loopback addresses are allowed in this mode only. Without
    --api-tokens the API runs without authentication, which is allowed only when it
    listens on loopback; the tenant then comes from the `clockwork-tenant` metadata.
    """
    settings = ProcessSettings(
        store=StoreSettings(kind="sqlite", sqlite_path=data_dir / _DEFAULT.store.sqlite_path.name),
        layout=LayoutSettings(shard_count=shards),
        api=_with_http(api, http_listen),
        ops=ops,
        targets=_target_policy(allow_private_targets, allow_loopback=True),
        kafka=kafka,
    )
    _run(settings, api=True, worker=True)


def _etcd_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = etcd_options.security_options(fn)
    fn = click.option(
        "--cluster-name",
        envvar="CLOCKWORK_CLUSTER",
        default=_DEFAULT_ETCD.cluster,
        show_default=True,
        help="Workers of one cluster share shards (etcd key prefix).",
    )(fn)
    return click.option(
        "--etcd",
        envvar="CLOCKWORK_ETCD",
        default=None,
        help="etcd members for shard ownership (worker) and the workers' load reports "
        "(api): HOST[:PORT] IP addresses, comma-separated, or one DNS name that resolves to "
        "every member (port 2379 by default); the client fails over between them. Without "
        "it a worker owns every shard.",
    )(fn)


def _etcd_settings(
    etcd: str | None,
    cluster_name: str,
    security: EtcdSecurity,
    lease_ttl_s: int = _DEFAULT_ETCD.lease_ttl_s,
) -> EtcdSettings | None:
    if not etcd:
        return None
    return EtcdSettings(
        endpoint=etcd_endpoints(etcd, "--etcd"),
        security=security,
        cluster=cluster_name,
        lease_ttl_s=lease_ttl_s,
        safety_margin_s=max(1.0, lease_ttl_s / 4),
    )


@cli.command()
@_cassandra_options
@_api_options
@_http_option(None)
@_ops_options
@_targets_option
@_etcd_options
def api(
    cassandra: CassandraSettings,
    api: ApiSettings,
    http_listen: str | None,
    ops: OpsSettings,
    kafka: str | None,  # accepted like the worker's; an api delivers nothing
    allow_private_targets: str,
    etcd: str | None,
    cluster_name: str,
    etcd_security: EtcdSecurity,
) -> None:
    """Run the stateless gRPC API against Cassandra."""
    settings = ProcessSettings(
        store=StoreSettings(kind="cassandra", cassandra=cassandra),
        api=_with_http(api, http_listen),
        ops=ops,
        targets=_target_policy(allow_private_targets, allow_loopback=False),
        etcd=_etcd_settings(etcd, cluster_name, etcd_security),
    )
    _run(settings, api=True, worker=False)


@cli.command()
@_cassandra_options
@_ops_options
@_targets_option
@click.option(
    "--max-concurrent-deliveries",
    type=click.IntRange(1, 100_000),
    default=_DEFAULT.worker.max_concurrent_deliveries,
    show_default=True,
    envvar="CLOCKWORK_MAX_CONCURRENT_DELIVERIES",
)
@click.option(
    "--max-tenant-share",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=_DEFAULT.worker.max_tenant_share,
    show_default=True,
    envvar="CLOCKWORK_MAX_TENANT_SHARE",
    help="The fraction of --max-concurrent-deliveries one tenant's deliveries may hold "
    "(at least one): a tenant whose endpoint hangs ties up no more, and the others' "
    "firings still go out. 1 for a single-tenant deployment.",
)
@_etcd_options
@click.option(
    "--lease-ttl",
    envvar="CLOCKWORK_LEASE_TTL",
    type=click.IntRange(2, 300),
    default=_DEFAULT_ETCD.lease_ttl_s,
    show_default=True,
    help="etcd lease TTL in seconds (failover time).",
)
def worker(
    cassandra: CassandraSettings,
    ops: OpsSettings,
    kafka: str | None,
    allow_private_targets: str,
    max_concurrent_deliveries: int,
    max_tenant_share: float,
    etcd: str | None,
    cluster_name: str,
    etcd_security: EtcdSecurity,
    lease_ttl: int,
) -> None:
    """Run a worker against Cassandra: scan due firings and deliver them."""
    settings = ProcessSettings(
        store=StoreSettings(kind="cassandra", cassandra=cassandra),
        ops=ops,
        targets=_target_policy(allow_private_targets, allow_loopback=False),
        worker=WorkerSettings(
            max_concurrent_deliveries=max_concurrent_deliveries,
            max_tenant_share=max_tenant_share,
        ),
        etcd=_etcd_settings(etcd, cluster_name, etcd_security, lease_ttl),
        kafka=kafka,
    )
    _run(settings, api=False, worker=True)


@cli.group()
def schema() -> None:
    """Manage the Cassandra schema."""


@schema.command()
@_cassandra_options
@click.option(
    "--replication-factor",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
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
    default=_DEFAULT.layout.shard_count,
    show_default=True,
    help="Shard count, fixed at cluster creation.",
)
@click.option(
    "--bucket",
    default=duration_text(_DEFAULT.layout.bucket_ms),
    show_default=True,
    help="Firings partition width, fixed at cluster creation.",
)
def migrate(
    cassandra: CassandraSettings,
    replication_factor: int,
    replication: str | None,
    shards: int,
    bucket: str,
) -> None:
    """Create the keyspace and apply pending migrations (idempotent)."""
    import time

    from clockwork_svc.domain.model import ClusterLayout
    from clockwork_svc.storage import cassandra as cassandra_store

    strategy: dict[str, object]
    if replication:
        strategy = {"class": "NetworkTopologyStrategy"}
        for entry in replication.split(","):
            dc, _, rf = entry.partition(":")
            if not dc or not rf.isdigit():
                raise click.BadParameter(f"{entry!r} is not DC:RF", param_hint="--replication")
            strategy[dc.strip()] = int(rf)
    else:
        strategy = {"class": "SimpleStrategy", "replication_factor": replication_factor}
    bucket_ms = duration_ms(bucket, "--bucket")
    if bucket_ms < 1000:
        raise click.BadParameter("must be at least 1s", param_hint="--bucket")
    cw_logging.configure(_DEFAULT.ops.log_level)
    layout = ClusterLayout(
        shard_count=shards, bucket_ms=bucket_ms, created_ms=int(time.time() * 1000)
    )
    try:
        applied = asyncio.run(
            cassandra_store.migrate(
                list(cassandra.contact_points),
                cassandra.keyspace,
                replication=strategy,
                layout=layout,
                local_dc=cassandra.local_dc,
                username=cassandra.username,
                password=cassandra.password,
                tls=cassandra.tls,
                connect_timeout_s=cassandra.connect_timeout_s,
            )
        )
    except StoreRefused as exc:
        raise click.ClickException(cassandra_access.refused(exc)) from exc
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
