"""The Kopf handlers (the only module that imports kopf): create, update and resume
apply a resource; delete cancels its schedule behind a finalizer; a timer refreshes
the status; start-up wires the clients and, if configured, the autoscaler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import kopf

from clockwork_operator import resource
from clockwork_operator.config import OperatorConfig
from clockwork_operator.credentials import Clients
from clockwork_operator.kube import Kube
from clockwork_operator.leader import LeaderElection
from clockwork_operator.reconciler import Busy, Invalid, Reconciler, ResourceId, Retry
from clockwork_operator.scaler import Autoscaler
from clockwork_operator.throttle import ApiThrottle

log = logging.getLogger(__name__)

RESOURCE = (resource.GROUP, resource.VERSION, resource.PLURAL)
FINALIZER = "clockwork.io/schedule-cleanup"


@dataclass
class _Runtime:
    config: OperatorConfig
    kube: Kube | None = None
    clients: Clients | None = None
    reconciler: Reconciler | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def ready(self) -> Reconciler:
        if self.reconciler is None:
            raise kopf.TemporaryError("operator still starting", delay=2)
        return self.reconciler


def build_registry(config: OperatorConfig, peering_clusterwide: bool) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    rt = _Runtime(config)

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In a pod: its service account; elsewhere: $KUBECONFIG or ~/.kube/config."""
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.mandatory = True
        settings.peering.clusterwide = peering_clusterwide
        settings.persistence.finalizer = FINALIZER
        # Kubernetes Events only for problems: at INFO every handler and timer run
        # would post one (10,000 resources refreshed every 30 s: 333 Events a second).
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        # A deleted resource keeps its finalizer until its status timer has stopped;
        # one not stopped at once (a busy loop) is checked again this soon, not 60 s.
        settings.background.cancellation_polling = 1
        # Kopf's own workers stay unbounded (a bounded pool holds each slot for the
        # worker's idle time, seconds per resource); the throttle paces the work.
        rt.kube = await Kube.connect()
        rt.clients = Clients(config, rt.kube)
        throttle = ApiThrottle(config.api_rate_per_s, config.max_concurrent_reconciles)
        rt.reconciler = Reconciler(rt.clients, throttle)
        scaling = config.autoscale
        if scaling.enabled:
            leader = LeaderElection(
                rt.kube,
                scaling.namespace,
                scaling.lease_name,
                config.identity,
                scaling.lease_duration_s,
            )
            admin = rt.clients.admin()
            scaler = Autoscaler(
                scaling,
                rt.kube,
                admin.cluster_load,
                lambda: leader.is_leader,
                admin.record_scale_decision,
                config.identity,
            )
            rt.tasks += [
                asyncio.create_task(leader.run(), name="autoscaler-leader"),
                asyncio.create_task(scaler.run(), name="autoscaler"),
            ]
            log.info(
                "autoscaling deployment %s/%s between %d and %d workers",
                scaling.namespace,
                scaling.deployment,
                scaling.policy.min_replicas,
                scaling.policy.max_replicas,
            )

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(**_: Any) -> None:
        for task in rt.tasks:
            task.cancel()
        await asyncio.gather(*rt.tasks, return_exceptions=True)
        if rt.clients is not None:
            await rt.clients.close()
        if rt.kube is not None:
            with contextlib.suppress(Exception):
                await rt.kube.close()

    @kopf.on.resume(*RESOURCE, id="apply", registry=registry)
    @kopf.on.create(*RESOURCE, id="apply", registry=registry)
    @kopf.on.update(*RESOURCE, id="apply", field="spec", registry=registry)
    @kopf.on.update(*RESOURCE, id="apply-labels", field="metadata.labels", registry=registry)
    async def apply(
        spec: kopf.Spec,
        meta: kopf.Meta,
        status: kopf.Status,
        namespace: str | None,
        name: str | None,
        uid: str | None,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        rid = ResourceId(namespace or "", name or "", uid or "")
        try:
            seen = await rt.ready().apply(rid, dict(spec), dict(meta.get("labels") or {}))
        except Invalid as exc:
            _set_ready(patch, status, False, "InvalidSpec", str(exc))
            patch.status["observedGeneration"] = meta.get("generation")
            raise kopf.PermanentError(str(exc)) from exc
        except Retry as exc:
            _set_ready(patch, status, False, "Retrying", str(exc))
            raise kopf.TemporaryError(str(exc), delay=exc.delay_s) from exc
        patch.status.update(resource.status(seen, meta.get("generation")))
        _set_ready(patch, status, True, "Synced", f"schedule {seen.key} is {seen.state}")

    @kopf.on.delete(*RESOURCE, id="cancel", registry=registry)
    async def cancel(
        spec: kopf.Spec,
        status: kopf.Status,
        namespace: str | None,
        name: str | None,
        uid: str | None,
        **_: Any,
    ) -> None:
        rid = ResourceId(namespace or "", name or "", uid or "")
        tenant = status.get("tenant")
        try:
            await rt.ready().cancel(rid, dict(spec), str(tenant) if tenant else None)
        except Retry as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay_s) from exc
        except Invalid as exc:
            log.warning("%s/%s: schedule not cancelled: %s", namespace, name, exc)

    @kopf.timer(
        *RESOURCE,
        id="refresh",
        interval=config.status_interval_s,
        initial_delay=config.status_interval_s,
        registry=registry,
    )
    async def refresh(
        spec: kopf.Spec,
        status: kopf.Status,
        namespace: str | None,
        name: str | None,
        uid: str | None,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        rid = ResourceId(namespace or "", name or "", uid or "")
        try:
            seen = await rt.ready().refresh(rid, dict(spec))
        except Busy:
            return  # the API budget went to applies and deletes; next tick
        except (Retry, Invalid) as exc:
            log.info("%s/%s: status not refreshed: %s", namespace, name, exc)
            return
        if seen is not None:
            fresh = resource.status(seen, status.get("observedGeneration"))
            patch.status.update({k: v for k, v in fresh.items() if status.get(k) != v})

    return registry


def _set_ready(
    patch: kopf.Patch, status: kopf.Status, ready: bool, reason: str, message: str
) -> None:
    condition = resource.ready_condition(ready, reason, message, int(time.time() * 1000))
    patch.status["conditions"] = resource.merge_conditions(status.get("conditions"), condition)


def run(
    config: OperatorConfig,
    *,
    namespaces: list[str],
    peering_name: str,
    priority: int,
    liveness: str | None,
) -> None:
    """Run the operator until SIGTERM (blocks; Kopf owns the event loop)."""
    clusterwide = not namespaces
    registry = build_registry(config, peering_clusterwide=clusterwide)
    kopf.run(
        registry=registry,
        clusterwide=clusterwide,
        namespaces=namespaces,
        peering_name=peering_name,
        priority=priority,
        liveness_endpoint=liveness,
        # Kopf's peering identity stays its own (host@pid); ours names the autoscaler's
        # Lease holder.
    )
