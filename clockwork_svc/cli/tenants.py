"""`clockwork tenant ...`: tenant administration (needs the admin token)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1.model import TenantInfo
from clockwork_svc.cli.options import option_group
from clockwork_svc.cli.parsing import duration_ms
from clockwork_svc.cli.schedules import (
    client_settings,
    iso,
    json_option,
    print_json,
    run_client,
    server_option,
    tls_options,
)
from clockwork_svc.client import ClientSettings
from clockwork_svc.domain.model import DEFAULT_RESPONSE_CAPTURE_BYTES, MAX_RESPONSE_CAPTURE_BYTES
from clockwork_svc.domain.spec import RetryKind, RetryPolicy
from clockwork_svc.domain.tenant import TenantDefaults, TenantLimits


def _admin_settings(
    server: str,
    token: str | None,
    tls_ca: Path | None,
    tls_client_cert: Path | None,
    tls_client_key: Path | None,
) -> ClientSettings:
    """An admin acts for no tenant in particular."""
    return client_settings(
        server=server,
        tenant=None,
        token=token,
        tls_ca=tls_ca,
        tls_client_cert=tls_client_cert,
        tls_client_key=tls_client_key,
    )


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The command receives `client: ClientSettings` and `as_json: bool`."""
    fn = option_group(
        "client",
        _admin_settings,
        tls_options,
        server_option,
        click.option(
            "--token",
            envvar="CLOCKWORK_ADMIN_TOKEN",
            default=None,
            help="The admin token (env CLOCKWORK_ADMIN_TOKEN).",
        ),
    )(fn)
    return json_option(fn)


def _show(t: TenantInfo) -> str:
    limits = t.limits
    return (
        f"{t.name}  v{t.version}  tokens={t.token_count}  "
        f"signing_secrets={t.signing_secret_count}  created={iso(t.created_ms)}  "
        f"rate={limits.rate_per_s or '-'}/s burst={limits.burst or '-'} "
        f"concurrency={limits.max_concurrency or '-'} drain={limits.drain_rate_per_s or '-'}/s"
        + ("  PAUSED" if t.paused else "")
    )


def _emit(reply: TenantInfo, as_json: bool) -> None:
    if as_json:
        print_json(convert.tenant_to_pb(reply))
    else:
        click.echo(_show(reply))


@click.group()
def tenant() -> None:
    """Tenant administration: tenants, API tokens and signing secrets."""


@tenant.command("create")
@click.argument("name")
@_options
def create(name: str, client: ClientSettings, as_json: bool) -> None:
    """Create a tenant; prints its first API token and signing secret (shown once)."""
    reply = run_client(lambda c: c.create_tenant(name), client)
    if as_json:
        print_json(convert.tenant_created_to_pb(reply))
        return
    click.echo(_show(reply.tenant))
    click.echo(f"token: {reply.token}")
    click.echo(f"signing secret: {reply.signing_secret}")


@tenant.command("get")
@click.argument("name")
@_options
def get(name: str, client: ClientSettings, as_json: bool) -> None:
    """Show a tenant (counts only; secrets are never shown again)."""
    reply = run_client(lambda c: c.get_tenant(name), client)
    _emit(reply, as_json)


@tenant.command("list")
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--page-token", default="")
@_options
def list_(page_size: int, page_token: str, client: ClientSettings, as_json: bool) -> None:
    """List tenants."""
    reply = run_client(lambda c: c.list_tenants(page_size, page_token), client)
    if as_json:
        print_json(convert.tenant_page_to_pb(reply))
        return
    for t in reply.items:
        click.echo(_show(t))
    if reply.next_page_token:
        click.echo(f"next page: --page-token {reply.next_page_token}")


@tenant.command("rotate-secret")
@click.argument("name")
@click.option(
    "--retire-previous",
    is_flag=True,
    help="Drop the older secrets at once (default: they keep signing).",
)
@_options
def rotate_secret(name: str, retire_previous: bool, client: ClientSettings, as_json: bool) -> None:
    """Add a new signing secret; prints it (shown once)."""
    reply = run_client(lambda c: c.rotate_signing_secret(name, retire_previous), client)
    if as_json:
        print_json(convert.secret_rotated_to_pb(reply))
        return
    click.echo(_show(reply.tenant))
    click.echo(f"signing secret: {reply.signing_secret}")


@tenant.command("issue-token")
@click.argument("name")
@_options
def issue_token(name: str, client: ClientSettings, as_json: bool) -> None:
    """Issue another API token for a tenant; prints it (shown once)."""
    reply = run_client(lambda c: c.issue_token(name), client)
    if as_json:
        print_json(convert.token_issued_to_pb(reply))
        return
    click.echo(_show(reply.tenant))
    click.echo(f"token: {reply.token}")


@tenant.command("revoke-tokens")
@click.argument("name")
@_options
def revoke_tokens(name: str, client: ClientSettings, as_json: bool) -> None:
    """Revoke every API token of a tenant."""
    reply = run_client(lambda c: c.revoke_tokens(name), client)
    _emit(reply, as_json)


@tenant.command("limits")
@click.argument("name")
@click.option("--rate", type=click.FloatRange(0), default=0.0, help="Deliveries/s (0: none).")
@click.option("--burst", type=click.IntRange(0), default=0, help="Bucket size (0: the rate).")
@click.option("--concurrency", type=click.IntRange(0), default=0, help="In flight (0: none).")
@click.option(
    "--drain-rate",
    type=click.FloatRange(0),
    default=0.0,
    help="Deliveries/s while draining after a resume (0: the rate).",
)
@_options
def limits(
    name: str,
    rate: float,
    burst: int,
    concurrency: int,
    drain_rate: float,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Set a tenant's delivery limits (each worker enforces its share)."""
    wanted = TenantLimits(
        rate_per_s=rate,
        burst=burst,
        max_concurrency=concurrency,
        drain_rate_per_s=drain_rate,
    )
    reply = run_client(lambda c: c.set_tenant_limits(name, wanted), client)
    _emit(reply, as_json)


@tenant.command("pause")
@click.argument("name")
@_options
def pause(name: str, client: ClientSettings, as_json: bool) -> None:
    """Sideline a tenant: hold its firings (not sent, not expired) until resumed."""
    reply = run_client(lambda c: c.pause_tenant(name), client)
    _emit(reply, as_json)


@tenant.command("resume")
@click.argument("name")
@_options
def resume(name: str, client: ClientSettings, as_json: bool) -> None:
    """Resume a sidelined tenant; held firings drain at its drain rate."""
    reply = run_client(lambda c: c.resume_tenant(name), client)
    _emit(reply, as_json)


@tenant.command("defaults")
@click.argument("name")
@click.option(
    "--retry",
    "kind",
    type=click.Choice(["default", "none", "fixed", "exponential"]),
    default="default",
    show_default=True,
    help="Default retry policy kind.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(0, 100),
    default=0,
    help="Total attempts (0: the kind's default).",
)
@click.option("--initial-delay", default=None, help="First retry delay (e.g. 2s).")
@click.option("--max-delay", default=None, help="Largest retry delay (e.g. 5m).")
@click.option("--relevancy", default=None, help="Default relevancy window (e.g. 30m).")
@click.option(
    "--response-capture",
    type=click.IntRange(0, MAX_RESPONSE_CAPTURE_BYTES),
    default=DEFAULT_RESPONSE_CAPTURE_BYTES,
    show_default=True,
    help="Bytes of each callback's response body kept with its execution.",
)
@_options
def defaults(
    name: str,
    kind: str,
    max_attempts: int,
    initial_delay: str | None,
    max_delay: str | None,
    relevancy: str | None,
    response_capture: int,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Set what the tenant's schedules get when their spec leaves a policy unset."""
    retry = RetryPolicy(
        kind=RetryKind(kind),
        max_attempts=max_attempts,
        initial_delay_ms=duration_ms(initial_delay, "--initial-delay") if initial_delay else 0,
        max_delay_ms=duration_ms(max_delay, "--max-delay") if max_delay else 0,
    )
    relevancy_ms = duration_ms(relevancy, "--relevancy") if relevancy else 0
    wanted = TenantDefaults(
        retry=retry, relevancy_window_ms=relevancy_ms, response_capture_bytes=response_capture
    )
    reply = run_client(lambda c: c.set_tenant_defaults(name, wanted), client)
    _emit(reply, as_json)
