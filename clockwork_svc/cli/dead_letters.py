"""`clockwork dlq list|redrive`: dead letters of the caller's tenant."""

from __future__ import annotations

from typing import Any

import click

from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1.model import DeadLetterRange
from clockwork_svc.cli.parsing import time_ms
from clockwork_svc.cli.schedules import client_options, iso, print_json, run_client


def _range_options(fn: Any) -> Any:
    fn = click.option("--since", help="ISO 8601 start (default: 7 days ago).")(fn)
    fn = click.option("--until", help="ISO 8601 end, exclusive (default: now).")(fn)
    fn = click.option("--key", default="", help="Only this schedule's dead letters.")(fn)
    return fn


def _range(kw: dict[str, Any]) -> DeadLetterRange:
    return DeadLetterRange(
        since_ms=time_ms(kw["since"], "--since") if kw["since"] else None,
        until_ms=time_ms(kw["until"], "--until") if kw["until"] else None,
        key=kw["key"],
    )


@click.group()
def dlq() -> None:
    """Dead letters: firings that failed for good."""


@dlq.command("list")
@_range_options
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--page-token", default="")
@client_options
def list_(**kw: Any) -> None:
    """List dead letters, oldest first."""
    reply = run_client(lambda c: c.dead_letters(_range(kw), kw["page_size"], kw["page_token"]), kw)
    if kw["as_json"]:
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
def redrive(**kw: Any) -> None:
    """Deliver dead letters again now (same delivery id, fresh attempts)."""
    if not (kw["firing_ids"] or kw["key"] or kw["since"] or kw["until"]):
        click.confirm("Redrive every dead letter of the last 7 days?", abort=True)
    reply = run_client(lambda c: c.redrive(_range(kw), kw["firing_ids"], kw["again"]), kw)
    if kw["as_json"]:
        print_json(convert.redrive_to_pb(reply))
        return
    click.echo(f"redriven: {reply.redriven}  skipped: {reply.skipped}")
