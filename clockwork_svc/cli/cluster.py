"""`clockwork cluster status`: live workers, their shards and epochs, unowned shards."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from clockwork_svc.cli import etcd_options
from clockwork_svc.cli.parsing import etcd_endpoints
from clockwork_svc.settings import EtcdSecurity, EtcdSettings

_DEFAULT = EtcdSettings()


@click.group()
def cluster() -> None:
    """Inspect the worker cluster (etcd)."""


@cluster.command()
@click.option(
    "--etcd",
    envvar="CLOCKWORK_ETCD",
    default=_DEFAULT.endpoint,
    show_default=True,
    callback=lambda _ctx, _param, value: etcd_endpoints(value, "--etcd"),
    help="etcd members: HOST[:PORT] IP addresses, comma-separated, or one DNS name that "
    "resolves to every member (the client fails over between them).",
)
@click.option(
    "--cluster-name", envvar="CLOCKWORK_CLUSTER", default=_DEFAULT.cluster, show_default=True
)
@etcd_options.security_options
@click.option("--json", "as_json", is_flag=True)
def status(etcd: str, cluster_name: str, etcd_security: EtcdSecurity, as_json: bool) -> None:
    """Show live workers, the shards each owns (with epochs) and unowned shards."""
    from clockwork_svc.coordination.etcd import cluster_status
    from clockwork_svc.coordination.etcd_access import EtcdAccessError

    reading = cluster_status(etcd, cluster_name, etcd_security)
    try:
        view = asyncio.run(asyncio.wait_for(reading, 15))
    except EtcdAccessError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # aetcd raises its own hierarchy; keep the CLI to one line
        raise click.ClickException(
            f"cannot read cluster state from etcd at {etcd}: {exc!r}"
        ) from exc
    by_worker: dict[str, dict[int, int]] = {w: {} for w in view.workers}
    for shard, (owner, epoch) in sorted(view.owners.items()):
        by_worker.setdefault(owner, {})[shard] = epoch
    unowned = sorted(set(range(view.shard_count or 0)) - set(view.owners))
    report: dict[str, Any] = {
        "revision": view.revision,
        "shard_count": view.shard_count,
        "workers": [
            {
                "id": w,
                "live": w in view.workers,
                **view.workers.get(w, {}),
                "shards": {str(s): e for s, e in shards.items()},
            }
            for w, shards in sorted(by_worker.items())
        ],
        "unowned": unowned,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(
        f"etcd revision {view.revision}, {view.shard_count or '?'} shards, "
        f"{len(view.workers)} live workers"
    )
    for entry in report["workers"]:
        shards = entry["shards"]
        listing = " ".join(f"{s}@{e}" for s, e in shards.items())
        click.echo(
            f"  {entry['id']}{'' if entry['live'] else ' (not live)'}: "
            f"{len(shards)} shards  {listing}"
        )
    click.echo(f"  unowned: {len(unowned)} {' '.join(map(str, unowned))}")
