"""The v1 ClusterService: the workers' load and the autoscaler's latest decision, for
admin callers (the operator, the dashboard)."""

from __future__ import annotations

from clockwork_svc.api.v1 import cluster_pb2 as pb
from clockwork_svc.api.v1 import cluster_pb2_grpc as pb_grpc
from clockwork_svc.api.v1.convert import (
    cluster_load_to_pb,
    scale_decision_from_pb,
    scale_decision_to_pb,
)
from clockwork_svc.cluster_load import LoadSource
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.server.servicer import rpc_method
from clockwork_svc.server.tenant_servicer import require_admin

_admin = rpc_method(require_admin)


class ClusterServicer(pb_grpc.ClusterServiceServicer):
    def __init__(self, load: LoadSource, metrics: Metrics) -> None:
        self._load = load
        self._metrics = metrics

    @_admin
    async def GetClusterLoad(self, request: pb.GetClusterLoadRequest, _: None) -> pb.ClusterLoad:
        return cluster_load_to_pb(await self._load.cluster_load())

    @_admin
    async def RecordScaleDecision(self, request: pb.ScaleDecision, _: None) -> pb.ScaleDecision:
        decision = scale_decision_from_pb(request)
        await self._load.record_scale_decision(decision)
        return scale_decision_to_pb(decision)
