"""Command line: ``python -m e2e.infra {up,down,status,fetch} [SERVER ...]``.

* ``up``: fetch, start what is not running, wait until ready, print ``KEY=VALUE``
  lines (also in ``<state>/env``), so ``eval "$(python -m e2e.infra up)"`` or
  ``set -a; . .infra/env`` exports them.  Reuses healthy running servers.
  Without names it starts every single server; the three-member clusters
  (``cassandra-cluster``, ``etcd-cluster``: secured like the two below, their
  credentials in the env lines beside their addresses), the secured etcd (``etcd-secure``:
  https only, client certificates, users and roles) and the secured Cassandra
  (``cassandra-secure``: TLS only, client certificates, logins and permissions) start
  only when named.
  ``--cassandra-commitlog-sync periodic`` launches Cassandra with its own default
  commit log sync (every 10 s) instead of the harness's ``batch`` (benchmarks of a
  production-like node; a kill -9 then loses the last acknowledged writes);
  ``group`` syncs every 10 ms (measured: much slower, docs/operations.md).
  ``--cassandra-unsafe-system`` launches it with ``-Dcassandra.unsafesystem=true``:
  schema changes are not flushed, so a new keyspace takes about 1 s instead of 2-3 s,
  and a kill -9 of that node loses the rows of tables created since it started. The
  test command's single node uses it: no test kills that node (the fault tests that
  kill Cassandra start their own, crash-safe).
  ``--cassandra-paxos-variant v1`` launches it with Cassandra's own default
  lightweight-transaction protocol instead of the harness's ``v2``
  (docs/operations.md, "Cassandra settings"). A node already running is reused as
  it is; ``up`` warns when it was launched with other options.
* ``down``: stop (SIGTERM, SIGKILL after a timeout) and delete state;
  ``--keep-data`` only stops.  Without names it stops the clusters too.
* ``status``: one line per server; exit 0 only if all are running and ready.
* ``fetch``: only fill the cache (e.g. a CI warm-up step).

Progress goes to stderr, so stdout carries only the env lines.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from .cassandra import (
    DEFAULT_COMMITLOG_SYNC,
    DEFAULT_PAXOS_VARIANT,
    Cassandra,
    CommitlogSync,
    PaxosVariant,
)
from .group import ServerGroup
from .registry import GROUPS, NAMED_ONLY, SERVERS
from .server import InfraError, Server

Managed = Server | ServerGroup

EXIT_FAILED = 1
EXIT_NOT_READY = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.infra",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state-dir", type=Path, help="default: $CLOCKWORK_INFRA_STATE or <repo>/.infra"
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="default: $CLOCKWORK_INFRA_CACHE or ~/.cache/clockwork-infra"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")
    # Only `up` takes the option; every command gets the default.
    parser.set_defaults(
        cassandra_commitlog_sync=DEFAULT_COMMITLOG_SYNC,
        cassandra_unsafe_system=False,
        cassandra_paxos_variant=DEFAULT_PAXOS_VARIANT,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start servers and print their env lines")
    _add_servers_argument(up)
    up.add_argument("--timeout", type=float, help="readiness timeout per server, seconds")
    up.add_argument(
        "--cassandra-commitlog-sync",
        choices=get_args(CommitlogSync),
        default=DEFAULT_COMMITLOG_SYNC,
        help="applies when Cassandra is launched, not to a running node (default: %(default)s)",
    )
    up.add_argument(
        "--cassandra-unsafe-system",
        action="store_true",
        help="schema changes not flushed: faster DDL, and a kill -9 loses the rows of new "
        "tables (applies when Cassandra is launched)",
    )
    up.add_argument(
        "--cassandra-paxos-variant",
        choices=get_args(PaxosVariant),
        default=DEFAULT_PAXOS_VARIANT,
        help="the lightweight-transaction protocol (applies when Cassandra is launched; "
        "default: %(default)s)",
    )
    down = commands.add_parser("down", help="stop servers and delete their data")
    _add_servers_argument(down)
    down.add_argument("--keep-data", action="store_true", help="only stop; keep data and ports")
    status = commands.add_parser("status", help="show whether servers run and are ready")
    _add_servers_argument(status)
    fetch = commands.add_parser("fetch", help="only download/cache the servers' binaries")
    _add_servers_argument(fetch)
    return parser


def _add_servers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "servers",
        nargs="*",
        metavar="SERVER",
        help=f"any of {', '.join([*SERVERS, *NAMED_ONLY, *GROUPS])} (default: every single server)",
    )


def _select(
    names: Sequence[str],
    state_dir: Path | None,
    cache_dir: Path | None,
    cassandra_commitlog_sync: CommitlogSync = DEFAULT_COMMITLOG_SYNC,
    *,
    cassandra_unsafe_system: bool = False,
    cassandra_paxos_variant: PaxosVariant = DEFAULT_PAXOS_VARIANT,
    groups_by_default: bool = False,
) -> list[Managed]:
    known = [*SERVERS, *NAMED_ONLY, *GROUPS]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InfraError(f"unknown server(s) {unknown}; known: {', '.join(known)}")
    default = known if groups_by_default else list(SERVERS)
    chosen: list[Managed] = []
    for name in known:
        if (names and name not in names) or (not names and name not in default):
            continue
        if name == "cassandra":
            chosen.append(
                Cassandra(
                    state_dir,
                    cache_dir,
                    commitlog_sync=cassandra_commitlog_sync,
                    unsafe_system=cassandra_unsafe_system,
                    paxos_variant=cassandra_paxos_variant,
                )
            )
        elif name in GROUPS:
            chosen.append(GROUPS[name](state_dir, cache_dir))
        else:
            chosen.append({**SERVERS, **NAMED_ONLY}[name](state_dir, cache_dir))
    return chosen


def _up(servers: list[Managed], timeout: float | None) -> int:
    env: dict[str, str] = {}
    for server in servers:
        started = time.monotonic()
        running = server.start(timeout)
        env.update(running.env)
        logging.info(
            "%s: ready at %s (pid %d, %s) in %.1fs",
            server.name,
            running.address,
            running.pid,
            running.detail,
            time.monotonic() - started,
        )
    for key, value in env.items():
        print(f"{key}={value}")
    return 0


def _down(servers: list[Managed], keep_data: bool) -> int:
    for server in reversed(servers):
        server.down(keep_data=keep_data)
        logging.info("%s: stopped%s", server.name, " (data kept)" if keep_data else "")
    return 0


def _status(servers: list[Managed]) -> int:
    statuses = [server.status() for server in servers]
    for status in statuses:
        print(status.line())
    return 0 if all(status.ready for status in statuses) else EXIT_NOT_READY


def _fetch(servers: list[Managed]) -> int:
    for server in servers:
        started = time.monotonic()
        server.fetch()
        logging.info("%s: cached in %.1fs", server.name, time.monotonic() - started)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="infra: %(message)s",
        stream=sys.stderr,
    )
    try:
        servers = _select(
            args.servers,
            args.state_dir,
            args.cache_dir,
            args.cassandra_commitlog_sync,
            cassandra_unsafe_system=args.cassandra_unsafe_system,
            cassandra_paxos_variant=args.cassandra_paxos_variant,
            groups_by_default=args.command == "down",
        )
        if args.command == "up":
            return _up(servers, args.timeout)
        if args.command == "down":
            return _down(servers, args.keep_data)
        if args.command == "status":
            return _status(servers)
        return _fetch(servers)
    except InfraError as exc:
        print(f"infra: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("infra: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
