"""Client commands: `clockwork schedule ...` and `clockwork executions list`."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click
from google.protobuf import json_format
from google.protobuf.message import Message

from clockwork_svc.api.v1 import convert
from clockwork_svc.cli import parsing
from clockwork_svc.cli.options import option_group
from clockwork_svc.cli.parsing import duration_ms, header, time_ms
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.labels import Selector, parse_selector
from clockwork_svc.domain.model import (
    BulkAction,
    Execution,
    Schedule,
    ScheduleQuery,
    ScheduleState,
)
from clockwork_svc.domain.spec import (
    DEFAULT_METHOD,
    HttpTarget,
    KafkaTarget,
    OverlapPolicy,
    RetryKind,
    RetryPolicy,
    ScheduleSpec,
    Target,
)
from clockwork_svc.errors import ClockworkError, InvalidArgument

T = TypeVar("T")


_TLS_OPTIONS = (
    ("--tls-ca", "CLOCKWORK_TLS_CA", "Use TLS, trusting this CA for the server's certificate."),
    ("--tls-client-cert", "CLOCKWORK_TLS_CLIENT_CERT", "Client certificate for mutual TLS."),
    ("--tls-client-key", "CLOCKWORK_TLS_CLIENT_KEY", "Client key for mutual TLS."),
)


def tls_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for flag, envvar, help_text in _TLS_OPTIONS:
        fn = click.option(
            flag,
            envvar=envvar,
            default=None,
            type=click.Path(exists=True, path_type=Path),
            help=help_text,
        )(fn)
    return fn


server_option = click.option(
    "--server",
    envvar="CLOCKWORK_SERVER",
    default=ClientSettings().server,
    show_default=True,
    help="API HOST:PORT.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def client_settings(
    server: str,
    tenant: str | None,
    token: str | None,
    tls_ca: Path | None,
    tls_client_cert: Path | None,
    tls_client_key: Path | None,
) -> ClientSettings:
    return ClientSettings(
        server=server,
        tenant=tenant,
        token=token,
        ca_file=tls_ca,
        cert_file=tls_client_cert,
        key_file=tls_client_key,
    )


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The command receives `client: ClientSettings` and `as_json: bool`."""
    fn = option_group(
        "client",
        client_settings,
        server_option,
        click.option(
            "--tenant",
            envvar="CLOCKWORK_TENANT",
            default=None,
            help="Tenant (with a token it must match the token's tenant).",
        ),
        click.option("--token", envvar="CLOCKWORK_TOKEN", default=None, help="API token."),
        tls_options,
    )(fn)
    return json_option(fn)


def run_client(coro_fn: Callable[[ClockworkClient], Awaitable[T]], settings: ClientSettings) -> T:
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
        + (f"  failed-in-a-row={s.failures_in_row}" if s.failures_in_row else "")
        + (f"  labels: {','.join(f'{k}={v}' for k, v in s.labels)}" if s.labels else "")
        + (f"  note: {s.note}" if s.note else "")
    )


def print_json(message: Message) -> None:
    """A reply as JSON: the API message it came in, in protobuf's JSON mapping."""
    click.echo(json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True))


@click.group()
def schedule() -> None:
    """Create and manage schedules."""


def _trigger(
    at: str | None,
    in_: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    count: int | None,
) -> triggers.Trigger:
    if sum(1 for chosen in (at, in_, every, cron) if chosen) != 1:
        raise click.UsageError("give exactly one of --at, --in, --every, --cron")
    if tz and not cron:
        raise click.UsageError("--tz goes with --cron")
    if at:
        return triggers.OnceTrigger(time_ms(at, "--at"))
    if in_:
        return triggers.OnceTrigger(int(time.time() * 1000) + duration_ms(in_, "--in"))
    if every:
        return triggers.IntervalTrigger(duration_ms(every, "--every"), count=count or None)
    assert cron
    return triggers.CronTrigger(cron, tz or "UTC", count=count or None)


def _retry(max_attempts: int | None) -> RetryPolicy:
    if max_attempts is None:
        return RetryPolicy()
    if max_attempts == 1:
        return RetryPolicy(RetryKind.NONE)
    return RetryPolicy(RetryKind.EXPONENTIAL, max_attempts=max_attempts)


def _target(
    url: str | None,
    kafka_topic: str | None,
    method: str,
    headers: tuple[str, ...],
    timeout: str | None,
) -> Target:
    if bool(url) == bool(kafka_topic):
        raise click.UsageError("give exactly one of --url, --kafka-topic")
    pairs = tuple(sorted(header(h) for h in headers))
    if kafka_topic:
        return KafkaTarget(kafka_topic, pairs)
    assert url
    return HttpTarget(
        url=url,
        method=method.upper(),
        headers=pairs,
        timeout_ms=duration_ms(timeout, "--timeout") if timeout else 0,
    )


def _spec(
    at: str | None,
    in_: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    count: int | None,
    url: str | None,
    kafka_topic: str | None,
    method: str,
    payload: str,
    headers: tuple[str, ...],
    max_attempts: int | None,
    timeout: str | None,
    ordering_key: str,
    pause_after_failures: int,
    overlap: str,
) -> ScheduleSpec:
    return ScheduleSpec(
        trigger=_trigger(at, in_, every, cron, tz, count),
        target=_target(url, kafka_topic, method, headers, timeout),
        payload=payload.encode(),
        retry=_retry(max_attempts),
        ordering_key=ordering_key,
        pause_after_failures=pause_after_failures,
        overlap=OverlapPolicy(overlap.replace("-", "_")),
    )


_spec_options = option_group(
    "spec",
    _spec,
    *reversed(  # listed as --help shows them
        [
            click.option("--at", help="Fire once at this ISO 8601 time (UTC if no offset)."),
            click.option("--in", "in_", help="Fire once after this duration (e.g. 30s)."),
            click.option("--every", help="Fire at this interval (e.g. 1s, 5m)."),
            click.option("--cron", help="Fire on this 5-field cron expression."),
            click.option("--tz", help="IANA time zone for --cron (default UTC)."),
            click.option("--count", type=click.IntRange(1), help="Stop after N occurrences."),
            click.option("--url", help="Callback URL (http/https)."),
            click.option("--kafka-topic", help="Produce to this Kafka topic instead of a URL."),
            click.option("--method", default=DEFAULT_METHOD, show_default=True),
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
            click.option(
                "--pause-after-failures",
                type=click.IntRange(0, 1000),
                default=0,
                help="Pause after N occurrences in a row failed for good (0: never).",
            ),
            click.option(
                "--overlap",
                type=click.Choice(["allow-all", "skip", "buffer-one"]),
                default="allow-all",
                show_default=True,
                help="An occurrence due while the previous delivery still runs: sent, "
                "skipped, or sent after it.",
            ),
        ]
    ),
)


label_option = click.option(
    "--label",
    "label_texts",
    multiple=True,
    help="KEY=VALUE (Kubernetes label rules); repeatable.",
)


@schedule.command("create")
@click.option("--key", required=True, help="Unique per tenant; repeating a create is safe.")
@_spec_options
@label_option
@client_options
def create(
    key: str,
    spec: ScheduleSpec,
    label_texts: tuple[str, ...],
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Create a schedule (idempotent on tenant and key)."""
    wanted = parsing.labels(label_texts)
    response = run_client(lambda c: c.create(key, spec, wanted), client)
    if as_json:
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
def update(
    key: str, expected_version: int, spec: ScheduleSpec, client: ClientSettings, as_json: bool
) -> None:
    """Replace the spec of a schedule."""
    _print_schedule(run_client(lambda c: c.update(key, spec, expected_version), client), as_json)


@schedule.command("get")
@click.argument("key")
@click.option(
    "--upcoming",
    type=click.IntRange(0, 100),
    default=10,
    show_default=True,
    help="How many next occurrence times to show.",
)
@click.option(
    "--executions",
    "execution_count",
    type=click.IntRange(0, 100),
    default=10,
    show_default=True,
    help="How many of the latest executions to show.",
)
@client_options
def get(
    key: str, upcoming: int, execution_count: int, client: ClientSettings, as_json: bool
) -> None:
    """Show one schedule, its next occurrence times and its latest executions."""
    detail = run_client(lambda c: c.describe(key, upcoming, execution_count), client)
    if as_json:
        print_json(convert.detail_to_pb(detail))
        return
    _print_schedule(detail.schedule, False)
    click.echo(f"  {triggers.describe(detail.schedule.spec.trigger)}")
    if upcoming:
        click.echo("upcoming:" if detail.upcoming_ms else "upcoming: none")
        zone = _zone_of(detail.schedule.spec.trigger)
        for ms in detail.upcoming_ms:
            click.echo(f"  {_local(ms, zone)}")
    if execution_count:
        click.echo("recent executions:" if detail.recent else "recent executions: none")
        for e in detail.recent:
            click.echo(f"  {_execution_line(e)}")


@schedule.command("preview")
@click.option("--at", help="Once at this ISO 8601 time (UTC if no offset).")
@click.option("--in", "in_", help="Once after this duration (e.g. 30s).")
@click.option("--every", help="At this interval (e.g. 1s, 5m).")
@click.option("--cron", help="On this 5-field cron expression.")
@click.option("--tz", help="IANA time zone for --cron (default UTC).")
@click.option(
    "--count",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="How many occurrence times to show.",
)
@click.option("--from", "from_", help="Preview from this ISO 8601 time instead of now.")
@client_options
def preview(
    at: str | None,
    in_: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    count: int,
    from_: str | None,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Show the times a trigger would fire, without creating a schedule (a dry run
    of a cron expression in its time zone, across DST changes)."""
    trigger = _trigger(at, in_, every, cron, tz, None)
    from_ms = time_ms(from_, "--from") if from_ else None
    times = run_client(lambda c: c.preview(trigger, count, from_ms), client)
    if as_json:
        print_json(convert.preview_to_pb(times, triggers.describe(trigger)))
        return
    click.echo(triggers.describe(trigger))
    zone = _zone_of(trigger)
    for ms in times:
        click.echo(f"  {_local(ms, zone)}")
    if not times:
        click.echo("  (no occurrence)")


def _selector(text: str) -> Selector:
    try:
        return parse_selector(text, "--selector")
    except InvalidArgument as exc:
        raise click.BadParameter(exc.message, param_hint="--selector") from exc


def _zone_of(trigger: triggers.Trigger) -> ZoneInfo | None:
    """The zone a cron trigger's times read best in (None: UTC is enough)."""
    if isinstance(trigger, triggers.CronTrigger) and trigger.timezone != "UTC":
        try:
            return ZoneInfo(trigger.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            return None
    return None


def _local(ms: int, zone: ZoneInfo | None) -> str:
    """A time in UTC, and in `zone` with its offset (which tells DST apart)."""
    if zone is None:
        return iso(ms)
    local = datetime.fromtimestamp(ms / 1000, tz=zone)
    return f"{iso(ms)}  {local.isoformat(sep=' ')} {local.tzname()}"


def _execution_line(e: Execution) -> str:
    return (
        f"{_time(e.started_ms)}  {e.outcome.name}  attempt={e.attempt}  "
        f"status={e.status_code or '-'}  due={_time(e.due_ms)}  "
        f"id={e.delivery_id}  {e.error}"
    )


@schedule.command("label")
@click.argument("key")
@label_option
@client_options
def label(key: str, label_texts: tuple[str, ...], client: ClientSettings, as_json: bool) -> None:
    """Replace a schedule's labels with the --label options given (none: remove all)."""
    wanted = parsing.labels(label_texts)
    _print_schedule(run_client(lambda c: c.set_labels(key, wanted), client), as_json)


_STATE_NAMES = {s.name.lower(): s for s in ScheduleState}


def _query(selector: str, prefix: str, states: tuple[str, ...]) -> ScheduleQuery | None:
    if not (selector or prefix or states):
        return None
    return ScheduleQuery(
        prefix,
        frozenset(_STATE_NAMES[s] for s in states),
        _selector(selector) if selector else None,
    )


_selection_options = option_group(
    "query",
    _query,
    click.option(
        "--state",
        "states",
        multiple=True,
        type=click.Choice(sorted(_STATE_NAMES)),
        help="Only schedules in this state; repeatable.",
    ),
    click.option("--prefix", default="", help="Only keys starting with this."),
    click.option("--selector", default="", help="Label selector, e.g. 'team=payments,env!=dev'."),
)


def _key_or_selection(command: Callable[..., Any]) -> Callable[..., Any]:
    """KEY, or a selection (--selector, --prefix, --state) with --dry-run: one
    schedule, or a bulk action (`_bulk_wanted` checks that exactly one is given)."""
    command = click.option(
        "--dry-run", is_flag=True, help="With a selection: count and name the matches."
    )(command)
    command = _selection_options(command)
    return click.argument("key", required=False)(command)


@schedule.command("list")
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--page-token", default="")
@_selection_options
@client_options
def list_(
    page_size: int,
    page_token: str,
    query: ScheduleQuery | None,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """List the tenant's schedules by key (a filtered page may be short and still have
    a next page)."""
    page = run_client(lambda c: c.list(page_size, page_token, query), client)
    if as_json:
        print_json(convert.schedule_page_to_pb(page))
        return
    for s in page.items:
        _print_schedule(s, False)
    if page.next_page_token:
        click.echo(f"next page: --page-token {page.next_page_token}")


@schedule.command("trigger")
@click.option("--payload", default=None, help="Send this body instead of the schedule's.")
@click.option(
    "--request-id",
    default="",
    help="Makes a repeated call fire nothing more (kept 24 hours).",
)
@_key_or_selection
@client_options
def trigger(
    key: str | None,
    payload: str | None,
    request_id: str,
    query: ScheduleQuery | None,
    dry_run: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Run one occurrence now, outside the timetable (which it does not shift): of KEY,
    or of every schedule a --selector/--prefix/--state selection matches."""
    if _bulk_wanted(key, query, dry_run):
        if payload is not None:
            raise click.UsageError("--payload goes with one KEY")
        assert query is not None
        _run_bulk(
            BulkAction.TRIGGER, query, client, as_json, request_id=request_id, dry_run=dry_run
        )
        return
    assert key is not None
    body = payload.encode() if payload is not None else None
    result = run_client(lambda c: c.trigger(key, body, request_id), client)
    if as_json:
        print_json(convert.triggered_to_pb(result))
        return
    verb = "triggered" if result.triggered else "already triggered"
    click.echo(f"{verb}: {key}  due={iso(result.due_ms)}  id={result.delivery_id}")


@schedule.command("backfill")
@click.argument("key")
@click.option("--from", "from_", required=True, help="First occurrence time (ISO 8601).")
@click.option("--to", required=True, help="End of the range, exclusive (ISO 8601).")
@client_options
def backfill(key: str, from_: str, to: str, client: ClientSettings, as_json: bool) -> None:
    """Fire the occurrences a schedule had in [--from, --to) now, in order, each with
    the delivery id it had (at most 1000 per call)."""
    start, end = time_ms(from_, "--from"), time_ms(to, "--to")
    result = run_client(lambda c: c.backfill(key, start, end), client)
    if as_json:
        print_json(convert.backfilled_to_pb(result))
        return
    if not result.count:
        click.echo(f"{key}: no occurrence in the range")
        return
    assert result.first_ms is not None and result.last_ms is not None
    click.echo(
        f"backfilled {result.count} occurrence{'' if result.count == 1 else 's'} of {key}: "
        f"{iso(result.first_ms)} .. {iso(result.last_ms)}"
    )


@schedule.command("pause")
@click.option("--note", default="", help="Who paused it and why (shown by get and list).")
@_key_or_selection
@client_options
def pause(
    key: str | None,
    note: str,
    query: ScheduleQuery | None,
    dry_run: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Stop firing until resumed: KEY, or every schedule a selection matches."""
    if _bulk_wanted(key, query, dry_run):
        assert query is not None
        _run_bulk(BulkAction.PAUSE, query, client, as_json, note=note, dry_run=dry_run)
        return
    assert key is not None
    _print_schedule(run_client(lambda c: c.pause(key, note), client), as_json)


def _bulk_wanted(key: str | None, query: ScheduleQuery | None, dry_run: bool) -> bool:
    """One KEY, or a selection (a bulk action): exactly one of them."""
    if (key is None) == (query is None):
        raise click.UsageError("give a KEY or a selection (--selector, --prefix, --state)")
    if dry_run and query is None:
        raise click.UsageError("--dry-run goes with a selection")
    return query is not None


def _run_bulk(
    action: BulkAction,
    query: ScheduleQuery,
    client: ClientSettings,
    as_json: bool,
    *,
    note: str = "",
    request_id: str = "",
    dry_run: bool = False,
) -> None:
    result = run_client(
        lambda c: c.bulk(action, query, note=note, request_id=request_id, dry_run=dry_run),
        client,
    )
    if as_json:
        print_json(convert.bulk_result_to_pb(result, ""))
    elif dry_run:
        first = ", ".join(result.first_keys)
        more = f" ({first}, ...)" if first else ""
        click.echo(f"dry run: {result.matched} schedules match{more}")
    else:
        click.echo(
            f"{action.value}: {result.matched} matched, {result.applied} applied, "
            f"{result.skipped} skipped, {result.failed} failed"
        )
        for key, message in result.failures:
            click.echo(f"  {key}: {message}", err=True)
    if result.failed:
        sys.exit(1)


def _state_command(name: str, action: BulkAction, doc: str) -> None:
    @schedule.command(name, help=doc)
    @_key_or_selection
    @client_options
    def command(
        key: str | None,
        query: ScheduleQuery | None,
        dry_run: bool,
        client: ClientSettings,
        as_json: bool,
    ) -> None:
        if _bulk_wanted(key, query, dry_run):
            assert query is not None
            _run_bulk(action, query, client, as_json, dry_run=dry_run)
            return

        def call(c: ClockworkClient) -> Awaitable[Schedule]:
            method: Callable[[str], Awaitable[Schedule]] = getattr(c, name)
            assert key is not None
            return method(key)

        _print_schedule(run_client(call, client), as_json)


_state_command(
    "resume",
    BulkAction.RESUME,
    "Resume a paused schedule from its next occurrence: KEY, or every schedule a "
    "selection matches.",
)
_state_command(
    "cancel", BulkAction.CANCEL, "Cancel for good: KEY, or every schedule a selection matches."
)


@click.group()
def executions() -> None:
    """Delivery history."""


@executions.command("list")
@click.argument("key")
@click.option("--page-size", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--page-token", default="")
@click.option("--verbose", "-v", is_flag=True, help="Show the response headers and body kept.")
@client_options
def list_executions(
    key: str,
    page_size: int,
    page_token: str,
    verbose: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """List delivery attempts of a schedule, newest first."""
    page = run_client(lambda c: c.executions(key, page_size, page_token), client)
    if as_json:
        print_json(convert.execution_page_to_pb(page))
        return
    for e in page.items:
        click.echo(_execution_line(e))
        if verbose:
            click.echo(f"    took {e.duration_ms} ms")
            for name, value in e.response_headers:
                click.echo(f"    {name}: {value}")
            if e.response_body:
                body = e.response_body.decode("utf-8", "replace")
                click.echo("    body: " + body.replace("\n", "\n          "))
    if page.next_page_token:
        click.echo(f"next page: --page-token {page.next_page_token}")
