"""Client commands: `clockwork schedule ...` and `clockwork executions list`."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from google.protobuf import json_format
from google.protobuf.message import Message

from clockwork_svc.api.v1 import convert
from clockwork_svc.cli.parsing import duration_ms, header, time_ms
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import Schedule
from clockwork_svc.domain.spec import (
    HttpTarget,
    KafkaTarget,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    Target,
)
from clockwork_svc.errors import ClockworkError

T = TypeVar("T")


def tls_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--tls-ca",
        envvar="CLOCKWORK_TLS_CA",
        default=None,
        type=click.Path(exists=True, path_type=Path),
        help="Use TLS, trusting this CA for the server's certificate.",
    )(fn)
    fn = click.option(
        "--tls-client-cert",
        envvar="CLOCKWORK_TLS_CLIENT_CERT",
        default=None,
        type=click.Path(exists=True, path_type=Path),
        help="Client certificate for mutual TLS.",
    )(fn)
    fn = click.option(
        "--tls-client-key",
        envvar="CLOCKWORK_TLS_CLIENT_KEY",
        default=None,
        type=click.Path(exists=True, path_type=Path),
        help="Client key for mutual TLS.",
    )(fn)
    return fn


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--server",
        envvar="CLOCKWORK_SERVER",
        default="127.0.0.1:7070",
        show_default=True,
        help="API HOST:PORT.",
    )(fn)
    fn = click.option(
        "--tenant",
        envvar="CLOCKWORK_TENANT",
        default=None,
        help="Tenant (with a token it must match the token's tenant).",
    )(fn)
    fn = click.option("--token", envvar="CLOCKWORK_TOKEN", default=None, help="API token.")(fn)
    fn = tls_options(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)
    return fn


def run_client(coro_fn: Callable[[ClockworkClient], Awaitable[T]], kw: dict[str, Any]) -> T:
    settings = ClientSettings(
        server=kw["server"],
        tenant=kw["tenant"],
        token=kw["token"],
        ca_file=kw.get("tls_ca"),
        cert_file=kw.get("tls_client_cert"),
        key_file=kw.get("tls_client_key"),
    )

    async def go() -> T:
        async with ClockworkClient(settings) as client:
            return await coro_fn(client)

    try:
        return asyncio.run(go())
    except ClockworkError as exc:
        status = exc.status.name if exc.status else type(exc).__name__
        click.echo(f"error: {status}: {exc}", err=True)
        sys.exit(1)


def iso(ms: int) -> str:
    """A time as the JSON output shows it (RFC 3339, UTC)."""
    return str(convert.ms_to_ts(ms).ToJsonString())


def _time(ms: int | None) -> str:
    return iso(ms) if ms else "-"


def _print_schedule(s: Schedule, as_json: bool) -> None:
    if as_json:
        print_json(convert.schedule_to_pb(s))
        return
    click.echo(
        f"{s.key}  {s.state.name}  v{s.version}  "
        f"next={_time(s.next_fire_ms)}  last={_time(s.last_fire_ms)} "
        f"({s.last_outcome.name if s.last_outcome else '-'})  "
        f"fired={s.fired_count}"
    )


def print_json(message: Message) -> None:
    """A reply as JSON: the API message it came in, in protobuf's JSON mapping."""
    click.echo(json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True))


@click.group()
def schedule() -> None:
    """Create and manage schedules."""


def _trigger(kw: dict[str, Any]) -> triggers.Trigger:
    chosen = [name for name in ("at", "in_", "every", "cron") if kw[name]]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --at, --in, --every, --cron")
    if kw["tz"] and not kw["cron"]:
        raise click.UsageError("--tz goes with --cron")
    if kw["at"]:
        return triggers.OnceTrigger(time_ms(kw["at"], "--at"))
    if kw["in_"]:
        return triggers.OnceTrigger(int(time.time() * 1000) + duration_ms(kw["in_"], "--in"))
    if kw["every"]:
        return triggers.IntervalTrigger(
            duration_ms(kw["every"], "--every"), count=kw["count"] or None
        )
    return triggers.CronTrigger(kw["cron"], kw["tz"] or "UTC", count=kw["count"] or None)


def _retry(kw: dict[str, Any]) -> RetryPolicy:
    if kw["max_attempts"] is None:
        return RetryPolicy()
    if kw["max_attempts"] == 1:
        return RetryPolicy(RetryKind.NONE)
    return RetryPolicy(RetryKind.EXPONENTIAL, max_attempts=kw["max_attempts"])


def _spec_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--at", help="Fire once at this ISO 8601 time (UTC if no offset)."),
            click.option("--in", "in_", help="Fire once after this duration (e.g. 30s)."),
            click.option("--every", help="Fire at this interval (e.g. 1s, 5m)."),
            click.option("--cron", help="Fire on this 5-field cron expression."),
            click.option("--tz", help="IANA time zone for --cron (default UTC)."),
            click.option("--count", type=click.IntRange(1), help="Stop after N occurrences."),
            click.option("--url", help="Callback URL (http/https)."),
            click.option("--kafka-topic", help="Produce to this Kafka topic instead of a URL."),
            click.option("--method", default="POST", show_default=True),
            click.option("--payload", default="", help="Request body."),
            click.option("--header", "headers", multiple=True, help="NAME=VALUE; repeatable."),
            click.option(
                "--max-attempts",
                type=click.IntRange(1, 100),
                default=None,
                help="Total delivery attempts (1 = no retries).",
            ),
            click.option("--timeout", default=None, help="Per-attempt timeout (e.g. 5s)."),
            click.option("--ordering-key", default="", help="Deliver in order per key."),
        ]
    ):
        fn = option(fn)
    return fn


def _target(kw: dict[str, Any]) -> Target:
    if bool(kw["url"]) == bool(kw["kafka_topic"]):
        raise click.UsageError("give exactly one of --url, --kafka-topic")
    headers = tuple(sorted(header(h) for h in kw["headers"]))
    if kw["kafka_topic"]:
        return KafkaTarget(kw["kafka_topic"], headers)
    return HttpTarget(
        url=kw["url"],
        method=kw["method"].upper(),
        headers=headers,
        timeout_ms=duration_ms(kw["timeout"], "--timeout") if kw["timeout"] else 0,
    )


def _spec(kw: dict[str, Any]) -> ScheduleSpec:
    return ScheduleSpec(
        trigger=_trigger(kw),
        target=_target(kw),
        payload=kw["payload"].encode(),
        retry=_retry(kw),
        ordering_key=kw["ordering_key"],
    )


@schedule.command("create")
@click.option("--key", required=True, help="Unique per tenant; repeating a create is safe.")
@_spec_options
@client_options
def create(**kw: Any) -> None:
    """Create a schedule (idempotent on tenant and key)."""
    spec = _spec(kw)
    response = run_client(lambda c: c.create(kw["key"], spec), kw)
    if kw["as_json"]:
        print_json(convert.created_to_pb(response))
        return
    verb = "created" if response.created else "exists"
    click.echo(f"{verb}: ", nl=False)
    _print_schedule(response.schedule, False)


@schedule.command("update")
@click.option("--key", required=True)
@click.option("--expected-version", type=int, default=0)
@_spec_options
@client_options
def update(**kw: Any) -> None:
    """Replace the spec of a schedule."""
    spec = _spec(kw)
    _print_schedule(
        run_client(lambda c: c.update(kw["key"], spec, kw["expected_version"]), kw), kw["as_json"]
    )


@schedule.command("get")
@click.argument("key")
@client_options
def get(**kw: Any) -> None:
    """Show one schedule."""
    _print_schedule(run_client(lambda c: c.get(kw["key"]), kw), kw["as_json"])


@schedule.command("list")
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--page-token", default="")
@client_options
def list_(**kw: Any) -> None:
    """List the tenant's schedules by key."""
    page = run_client(lambda c: c.list(kw["page_size"], kw["page_token"]), kw)
    if kw["as_json"]:
        print_json(convert.schedule_page_to_pb(page))
        return
    for s in page.items:
        _print_schedule(s, False)
    if page.next_page_token:
        click.echo(f"next page: --page-token {page.next_page_token}")


def _state_command(name: str, doc: str) -> None:
    @schedule.command(name, help=doc)
    @click.argument("key")
    @client_options
    def command(**kw: Any) -> None:
        def call(client: ClockworkClient) -> Awaitable[Schedule]:
            method: Callable[[str], Awaitable[Schedule]] = getattr(client, name)
            return method(kw["key"])

        _print_schedule(run_client(call, kw), kw["as_json"])


_state_command("pause", "Stop firing until resumed.")
_state_command("resume", "Resume a paused schedule from its next occurrence.")
_state_command("cancel", "Cancel a schedule for good.")


@click.group()
def executions() -> None:
    """Delivery history."""


@executions.command("list")
@click.argument("key")
@click.option("--page-size", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--page-token", default="")
@client_options
def list_executions(**kw: Any) -> None:
    """List delivery attempts of a schedule, newest first."""
    page = run_client(lambda c: c.executions(kw["key"], kw["page_size"], kw["page_token"]), kw)
    if kw["as_json"]:
        print_json(convert.execution_page_to_pb(page))
        return
    for e in page.items:
        click.echo(
            f"{_time(e.started_ms)}  {e.outcome.name}  attempt={e.attempt}  "
            f"status={e.status_code or '-'}  due={_time(e.due_ms)}  "
            f"id={e.delivery_id}  {e.error}"
        )
    if page.next_page_token:
        click.echo(f"next page: --page-token {page.next_page_token}")
