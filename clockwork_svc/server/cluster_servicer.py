"""The v1 ClusterService: the workers' load, for admin callers (the operator)."""

from __future__ import annotations

from clockwork_svc.api.v1 import cluster_pb2 as pb
from clockwork_svc.api.v1 import cluster_pb2_grpc as pb_grpc
from clockwork_svc.api.v1.convert import ms_to_ts
from clockwork_svc.cluster_load import LoadSource
from clockwork_svc.domain.load import ClusterLoad
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.server.servicer import rpc_method
from clockwork_svc.server.tenant_servicer import require_admin

_admin = rpc_method(require_admin)


def cluster_load_to_pb(load: ClusterLoad) -> pb.ClusterLoad:
    return pb.ClusterLoad(
        workers=[
            pb.WorkerLoad(
                worker_id=w.worker_id,
                shards=w.shards,
                due_per_second=w.due_per_s,
                overdue=w.overdue,
                dispatch_per_second=w.dispatch_per_s,
                lag_p50_ms=w.lag_p50_ms,
                lag_p99_ms=w.lag_p99_ms,
                in_flight=w.in_flight,
                window_seconds=w.window_s,
                report_time=ms_to_ts(w.report_ms),
            )
            for w in sorted(load.workers, key=lambda w: w.worker_id)
        ],
        due_per_second=load.due_per_s,
        dispatch_per_second=load.dispatch_per_s,
        overdue=load.overdue,
        lag_p99_ms=load.lag_p99_ms,
        shard_count=load.shard_count,
        shards_owned=load.shards_owned,
    )


class ClusterServicer(pb_grpc.ClusterServiceServicer):
    def __init__(self, load: LoadSource, metrics: Metrics) -> None:
        self._load = load
        self._metrics = metrics

    @_admin
    async def GetClusterLoad(self, request: pb.GetClusterLoadRequest, _: None) -> pb.ClusterLoad:
        return cluster_load_to_pb(await self._load.cluster_load())
