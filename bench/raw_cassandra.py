"""The raw insert limits: the rows a create writes (schedule, first firing), written
straight with the driver's `execute_async`, K creates in flight, no API, no asyncio:
each create's writes chained in driver callbacks, in the order the store writes them.

Two limits: `conditional` writes each schedule with the store's compare-and-set (its
own CQL: a lightweight transaction, one Paxos round per schedule); `plain` writes the
same row with a plain INSERT (what a create would cost without the compare-and-set).
The store itself groups the creates of a batch that share a partition into one
conditional batch, so its API can run above the conditional limit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clockwork_svc.domain import planning
from clockwork_svc.domain.identity import bucket_of
from clockwork_svc.domain.model import ClusterLayout
from clockwork_svc.domain.spec import ScheduleSpec
from clockwork_svc.storage.cassandra import connecting, rows, schema
from clockwork_svc.storage.cassandra import store as cassandra_store
from clockwork_svc.storage.columns import SCHEDULES, markers
from e2e.stores import CassandraAccess

_STATEMENTS = ("insert_schedule", "put_firing")


@dataclass(frozen=True, slots=True)
class RawResult:
    concurrency: int
    n: int
    seconds: float
    errors: int

    @property
    def per_s(self) -> float:
        return self.n / self.seconds


def create_params(
    tenant: str,
    keys: Sequence[str],
    spec: ScheduleSpec,
    layout: ClusterLayout,
    conditional: bool = True,
) -> list[tuple[tuple[Any, ...], ...]]:
    """Per key, the parameters of the three writes, exactly as the store binds them
    (`conditional`), or with the schedule as a plain INSERT's."""
    now = int(time.time() * 1000)
    out: list[tuple[tuple[Any, ...], ...]] = []
    for key in keys:
        s, f = planning.new_schedule(tenant, key, spec, uuid.uuid4().hex, now, layout)
        assert f is not None
        ttl = cassandra_store.firing_ttl_s(f.fire_at_ms, 7 * 86_400, now / 1000)
        bucket = bucket_of(f.fire_at_ms, layout.bucket_ms)
        out.append(
            (
                rows.insert_schedule_params(s)
                if conditional
                else (rows.schedule_part(key), *SCHEDULES.encode(s)),
                rows.firing_params(f, bucket, ttl),
            )
        )
    return out


class RawInserter:
    def __init__(self, session: Any, keyspace: str, conditional: bool = True) -> None:
        self._session = session
        cql = cassandra_store.cql(keyspace)
        texts = [getattr(cql, name) for name in _STATEMENTS]
        if not conditional:
            texts[0] = cassandra_store.Cql(
                f"INSERT INTO {keyspace}.schedules_by_part (part, {SCHEDULES.names}) "
                f"VALUES ({markers(len(SCHEDULES.columns) + 1)})",
                True,
            )
        self._statements = [cassandra_store.prepare(session, text) for text in texts]
        self._profiles = [
            connecting.PROFILE_LWT if conditional else connecting.PROFILE_DEFAULT,
            connecting.PROFILE_DEFAULT,
        ]

    def run(self, params: list[tuple[tuple[Any, ...], ...]], concurrency: int) -> RawResult:
        """Blocking: write every create, `concurrency` creates in flight."""
        lock = threading.Lock()
        done = threading.Event()
        next_index = iter(range(len(params)))
        state = {"left": len(params), "errors": 0}

        def start_next() -> None:
            with lock:
                i = next(next_index, None)
            if i is not None:
                step(i, 0)

        def finish_one(ok: bool) -> None:
            with lock:
                state["left"] -= 1
                state["errors"] += 0 if ok else 1
                if state["left"] == 0:
                    done.set()
            start_next()

        def step(i: int, stage: int) -> None:
            future = self._session.execute_async(
                self._statements[stage], params[i][stage], execution_profile=self._profiles[stage]
            )
            if stage == len(_STATEMENTS) - 1:
                future.add_callbacks(lambda _: finish_one(True), lambda _: finish_one(False))
            else:
                future.add_callbacks(lambda _: step(i, stage + 1), lambda _: finish_one(False))

        started = time.perf_counter()
        for _ in range(min(concurrency, len(params))):
            start_next()
        done.wait()
        return RawResult(concurrency, len(params), time.perf_counter() - started, state["errors"])


async def connect(access: CassandraAccess, keyspace: str) -> tuple[Any, Any, ClusterLayout]:
    cluster, session = await connecting.connect(
        access.contact_points, timeout_s=60, **access.connect_kwargs()
    )
    layout = await schema.load_layout(session, keyspace)
    assert layout is not None, f"keyspace {keyspace} has no layout"
    return cluster, session, layout


async def shutdown(cluster: Any) -> None:
    await connecting.shutdown(cluster)
