"""The APScheduler 3 peer, one process: a SQLAlchemy job store on SQLite, a thread pool
executor, one date-triggered job per firing that POSTs to the sink.

Run: python -m bench.peer_apscheduler --db FILE --url URL --n N --window-ms W. It adds
N jobs due over W ms after it can have added them all (the add rate measured on a
first slice), prints `FIRST_DUE <ms>`, runs them and exits on SIGTERM. Job i has
delivery id `aps-<i>` and is due at FIRST_DUE + i * W // N.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import threading
import time
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from bench import peer_http

PAYLOAD = b'{"bench":"fire","event":"reminder","note":"a small json payload"}'


def fire(url: str, delivery_id: str) -> None:
    peer_http.post(url, PAYLOAD, delivery_id)


def _at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description="APScheduler peer")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--window-ms", type=int, required=True)
    parser.add_argument("--threads", type=int, default=20)
    args = parser.parse_args()
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{args.db}")},
        executors={"default": ThreadPoolExecutor(args.threads)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=dt.UTC,
    )
    scheduler.start(paused=True)
    calibration = max(20, min(1000, args.n // 10))
    far = int(time.time() * 1000) + 86_400_000
    started = time.perf_counter()
    for i in range(calibration):
        scheduler.add_job(
            fire, "date", run_date=_at(far), args=[args.url, f"cal-{i}"], id=f"cal-{i}"
        )
    rate = calibration / (time.perf_counter() - started)
    first_due = int(time.time() * 1000) + int(max(5.0, 1.3 * args.n / rate + 3) * 1000)
    for i in range(args.n):
        due = first_due + (i * args.window_ms) // args.n
        scheduler.add_job(
            fire, "date", run_date=_at(due), args=[args.url, f"aps-{i}"], id=f"aps-{i}"
        )
    scheduler.resume()
    print(f"FIRST_DUE {first_due}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    scheduler.shutdown(wait=False)


if __name__ == "__main__":
    main()
