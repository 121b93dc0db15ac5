"""The Celery peer: one task that POSTs a payload to the sink (bench/peer_http.py),
enqueued as ETA tasks on a Redis broker.

The worker runs as `celery -A bench.peer_celery worker`; Celery loads the app from this
module by name, so the broker address comes from BENCH_REDIS_URL when it is imported.

Delivery is at least once, as Clockwork's: a task is acknowledged after it ran
(`task_acks_late`), so a worker that dies mid-delivery leaves it to be delivered again
instead of losing it (Celery's default acknowledges before running).
"""

from __future__ import annotations

import os

from celery import Celery

from bench import peer_http

app = Celery("bench_peer", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,
    task_acks_late=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    # ETA tasks wait in the worker's memory until due; an hour is ample for a run.
    broker_transport_options={"visibility_timeout": 3600},
)


@app.task(name="bench.post")  # type: ignore[untyped-decorator]
def post(url: str, payload: bytes, delivery_id: str) -> int:
    return peer_http.post(url, payload, delivery_id)
