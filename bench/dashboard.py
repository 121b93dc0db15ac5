"""Benchmark the dashboard's pages and the HTTP API on a large tenant.

Usage: python -m bench.dashboard [--store sqlite|cassandra] [--schedules 100000]
       [--dead-letters 10000] [--reps 20] [--out DIR]

Starts an api and a worker in this process (the embedded store, or a fresh keyspace
on the Cassandra that CLOCKWORK_CASSANDRA names), creates `--schedules` one-shots due
in a year (BatchCreateSchedules, 500 a call, labelled team=t0..t9) and
`--dead-letters` one-shots due now whose target answers 400 (each is dead-lettered
on its one attempt), then loads each page `--reps` times, one at a time, and reports
the response time of its HTML (median, p95, max): the server's part of a page load
(the stylesheet is a static file, and no page has a script).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import machine, pct, print_table, write_json
from clockwork_svc import app, gc_policy
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.domain import triggers
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.domain.netpolicy import AddressPolicy
from clockwork_svc.domain.spec import HttpTarget, RetryKind, RetryPolicy, ScheduleSpec
from clockwork_svc.server.auth import AuthSettings
from clockwork_svc.settings import (
    ApiSettings,
    CassandraSettings,
    LayoutSettings,
    OpsSettings,
    ProcessSettings,
    StoreSettings,
)
from e2e.sink import RecordingSink

TENANT = "bench"
BATCH = 500


async def seed(client: ClockworkClient, count: int, make: Any) -> float:
    started = time.monotonic()
    semaphore = asyncio.Semaphore(4)

    async def batch(first: int) -> None:
        async with semaphore:
            requests = [make(i) for i in range(first, min(count, first + BATCH))]
            for outcome in await client.create_many(requests):
                if isinstance(outcome, Exception):
                    raise outcome

    await asyncio.gather(*(batch(i) for i in range(0, count, BATCH)))
    return count / (time.monotonic() - started)


async def timed(session: aiohttp.ClientSession, url: str, reps: int) -> dict[str, Any]:
    times: list[float] = []
    size = 0
    for _ in range(reps):
        started = time.perf_counter()
        async with session.get(url) as reply:
            body = await reply.read()
            assert reply.status == 200, (url, reply.status, body[:300])
            assert b'class="error"' not in body, (url, body[:600])
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return {
        "median_ms": round(pct(times, 0.5), 1),
        "p95_ms": round(pct(times, 0.95), 1),
        "max_ms": round(max(times), 1),
        "kB": round(size / 1024, 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="clockwork-dashboard-"))
    store = StoreSettings(kind="sqlite", sqlite_path=data / "clockwork.db")
    keyspace = ""
    if args.store == "cassandra":
        import os

        from clockwork_svc.storage import cassandra

        address = os.environ["CLOCKWORK_CASSANDRA"]
        keyspace = "dash_" + uuid.uuid4().hex[:10]
        layout = ClusterLayout(64, 60_000, int(time.time() * 1000) - 60_000)
        await cassandra.create_cluster_for_tests([address], keyspace, layout)
        store = StoreSettings(
            kind="cassandra",
            cassandra=CassandraSettings(contact_points=(address,), keyspace=keyspace),
        )
    settings = ProcessSettings(
        store=store,
        layout=LayoutSettings(shard_count=64),
        api=ApiSettings(
            listen="127.0.0.1:0",
            auth=AuthSettings(enabled=False),
            http_listen=("127.0.0.1", 0),
        ),
        ops=OpsSettings(port=0, log_level="WARNING"),
        targets=AddressPolicy(allow_loopback=True),
    )
    sink = await RecordingSink(responder=lambda path, n: 400).start()
    sink_url = sink.url
    report: dict[str, Any] = {"machine": machine(), "store": args.store}
    try:
        async with app.running(settings, api=True, worker=True) as node:
            assert node.api is not None and node.http is not None
            # As `clockwork api` does once up (gc_policy): without it, full collections
            # of this process's heap stop the api for 100-400 ms.
            gc_policy.freeze_startup_heap(settings.ops.gc_young_threshold)
            client_settings = ClientSettings(f"127.0.0.1:{node.api.port}", tenant=TENANT)
            year = int(time.time() * 1000) + 365 * 86_400_000
            future = triggers.OnceTrigger(year)
            once = RetryPolicy(RetryKind.NONE)
            async with ClockworkClient(client_settings) as client:
                report["create_per_s"] = round(
                    await seed(
                        client,
                        args.schedules,
                        lambda i: (
                            f"sched/{i:06d}",
                            ScheduleSpec(future, HttpTarget(sink_url + "/never")),
                            {"team": f"t{i % 10}"},
                        ),
                    )
                )
                now = triggers.OnceTrigger(int(time.time() * 1000))
                await seed(
                    client,
                    args.dead_letters,
                    lambda i: (
                        f"dl/{i:05d}",
                        dataclasses.replace(
                            ScheduleSpec(now, HttpTarget(sink_url + "/dead")), retry=once
                        ),
                    ),
                )
            deadline = time.monotonic() + 600
            while len(sink.received) < args.dead_letters:
                assert time.monotonic() < deadline, f"{len(sink.received)} dead letters"
                await asyncio.sleep(0.5)
            await asyncio.sleep(3)  # the last records land after their deliveries
            base = f"http://127.0.0.1:{node.http.port}"
            middle = f"sched/{args.schedules // 2:06d}"
            pages = {
                "schedules, first page": "/ui/schedules",
                "schedules, page 100 (token)": "",
                "schedules, key prefix": f"/ui/schedules?prefix={middle[:-2]}",
                "schedules, label selector (1 in 10)": "/ui/schedules?selector=team%3Dt3",
                "schedules, a state none has": "/ui/schedules?state=PAUSED",
                "schedules, a label none has": "/ui/schedules?selector=team%3Dnone",
                "schedule": f"/ui/schedule?key={middle}",
                "dead letters": "/ui/dead-letters",
                "cluster": "/ui/cluster",
                "JSON: GET /v1/schedules": "/v1/schedules?pageSize=50",
            }
            rows = []
            cookies = {"clockwork_tenant": TENANT}
            async with aiohttp.ClientSession(
                base, cookies=cookies, headers={"Clockwork-Tenant": TENANT}
            ) as session:
                pages["schedules, page 100 (token)"] = await deep_page(session, 100)
                for name, path in pages.items():
                    rows.append({"page": name, **await timed(session, path, args.reps)})
            report["pages"] = rows
    finally:
        await sink.stop()
        if keyspace:
            from clockwork_svc.storage import cassandra

            await cassandra.drop_keyspace_for_tests(
                [settings.store.cassandra.contact_points[0]], keyspace
            )
    return report


async def deep_page(session: aiohttp.ClientSession, pages: int) -> str:
    """The path of the `pages`-th page of the JSON listing's tokens, as a dashboard URL."""
    token = ""
    for _ in range(pages - 1):
        async with session.get("/v1/schedules", params={"pageSize": 50, "pageToken": token}) as r:
            token = (await r.json())["nextPageToken"]
    return "/ui/schedules?page=" + token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", choices=("sqlite", "cassandra"), default="sqlite")
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--dead-letters", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(
        f"{args.store}: {args.schedules:,} schedules ({report['create_per_s']:,}/s created),"
        f" {args.dead_letters:,} dead letters"
    )
    print_table("page response times", report["pages"])
    print(f"\nwrote {write_json('dashboard', report, args.out)}")


if __name__ == "__main__":
    main()
