"""Where the API reads the cluster's load from (for GetClusterLoad, and so for the
operator's autoscaling): the workers' reports in etcd, or the in-process worker of a
process without etcd (`clockwork dev`). The autoscaler's latest decision is kept
beside them (RecordScaleDecision)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from clockwork_svc.domain.load import ClusterLoad, ScaleDecision, WorkerLoad
from clockwork_svc.errors import FailedPrecondition


class LoadSource(Protocol):
    async def cluster_load(self) -> ClusterLoad: ...

    async def record_scale_decision(self, decision: ScaleDecision) -> None: ...


class LocalLoad:
    """One worker in this process owning every shard."""

    def __init__(
        self,
        report: Callable[[str, float], WorkerLoad],
        worker_id: str,
        window_s: float,
        owned: Callable[[], Mapping[int, int]] = dict,
    ) -> None:
        self._report = report
        self._worker_id = worker_id
        self._window_s = window_s
        self._owned = owned
        self._decision: ScaleDecision | None = None

    async def cluster_load(self) -> ClusterLoad:
        load = self._report(self._worker_id, self._window_s)
        owners = tuple(
            (shard, self._worker_id, epoch) for shard, epoch in sorted(self._owned().items())
        )
        return ClusterLoad((load,), load.shards, load.shards, owners, self._decision)

    async def record_scale_decision(self, decision: ScaleDecision) -> None:
        self._decision = decision


class NoLoad:
    """An API process that neither runs a worker nor knows the workers' etcd."""

    async def cluster_load(self) -> ClusterLoad:
        raise FailedPrecondition(_NO_ETCD)

    async def record_scale_decision(self, decision: ScaleDecision) -> None:
        raise FailedPrecondition(_NO_ETCD)


_NO_ETCD = "this API server cannot see the workers: start it with --etcd (the workers' etcd)"
