"""`clockwork dlq list|redrive`: dead letters of the caller's tenant."""

from __future__ import annotations

import click

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.cli.options import option_group
from clockwork_svc.cli.parsing import time_ms
from clockwork_svc.cli.schedules import client_options, iso, print_json, run_client
from clockwork_svc.client import ClientSettings


def _range(since: str | None, until: str | None, key: str) -> DeadLetterRange:
    return DeadLetterRange(
        since_ms=time_ms(since, "--since") if since else None,
        until_ms=time_ms(until, "--until") if until else None,
        key=key,
    )


_range_options = option_group(
    "window",
    _range,
    click.option("--since", help="ISO 8601 start (default: 7 days ago)."),
    click.option("--until", help="ISO 8601 end, exclusive (default: now)."),
    click.option("--key", default="", help="Only this schedule's dead letters."),
)


@click.group()
def dlq() -> None:
    """Dead letters: firings that failed for good."""


@dlq.command("list")
@_range_options
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--page-token", default="")
@client_options
def list_(
    window: DeadLetterRange,
    page_size: int,
    page_token: str,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """List dead letters, oldest first."""
    reply = run_client(lambda c: c.dead_letters(window, page_size, page_token), client)
    if as_json:
        print_json(convert.dead_letter_page_to_pb(reply))
        return
    for d in reply.items:
        redriven = f"  redriven {iso(d.redriven_ms)}" if d.redriven_ms is not None else ""
        click.echo(
            f"{iso(d.dead_ms)}  {d.schedule_key}  attempts={d.attempts}  "
            f"status={d.last_status or '-'}  firing={d.firing_id}  "
            f"id={d.delivery_id}  {d.last_error}{redriven}"
        )
    if reply.next_page_token:
        click.echo(f"next page: --page-token {reply.next_page_token}")


@dlq.command("redrive")
@_range_options
@click.option(
    "--firing-id",
    "firing_ids",
    multiple=True,
    help="Redrive this dead letter (repeatable); default: all in the range.",
)
@click.option("--again", is_flag=True, help="Also redrive letters already redriven.")
@client_options
def redrive(
    window: DeadLetterRange,
    firing_ids: tuple[str, ...],
    again: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Deliver dead letters again now (same delivery id, fresh attempts)."""
    if not (firing_ids or window.key or window.since_ms is not None or window.until_ms is not None):
        click.confirm("Redrive every dead letter of the last 7 days?", abort=True)
    reply = run_client(lambda c: c.redrive(window, firing_ids, again), client)
    if as_json:
        print_json(convert.redrive_to_pb(reply))
        return
    click.echo(f"redriven: {reply.redriven}  skipped: {reply.skipped}")
