"""The Kubernetes API calls the operator makes besides Kopf's own (the only module
that imports kubernetes_asyncio): tenant Secrets, the worker Deployment's replicas,
Events about it, and the Lease that elects the autoscaler."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class DeploymentState:
    replicas: int
    annotations: Mapping[str, str]
    uid: str


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    renew_time: datetime | None
    duration_s: int
    resource_version: str
    transitions: int


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._coordination = client.CoordinationV1Api(api)

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        """In a pod: its service account; else `kubeconfig` or $KUBECONFIG."""
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            return cls(client.ApiClient())
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG"),
            client_configuration=configuration,
        )
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        """The Secret's values, decoded; KubeError(404) if it does not exist."""
        try:
            secret = await self._core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            raise _error(exc, f"secret {namespace}/{name}") from exc
        return {
            key: base64.b64decode(value).decode("utf-8", "replace")
            for key, value in (secret.data or {}).items()
        }

    async def deployment(self, namespace: str, name: str) -> DeploymentState:
        try:
            dep = await self._apps.read_namespaced_deployment(name, namespace)
        except ApiException as exc:
            raise _error(exc, f"deployment {namespace}/{name}") from exc
        return DeploymentState(
            replicas=int(dep.spec.replicas if dep.spec.replicas is not None else 1),
            annotations=dict(dep.metadata.annotations or {}),
            uid=str(dep.metadata.uid),
        )

    async def scale_deployment(
        self, namespace: str, name: str, replicas: int, annotations: Mapping[str, str]
    ) -> None:
        body = {"spec": {"replicas": replicas}, "metadata": {"annotations": dict(annotations)}}
        try:
            await self._apps.patch_namespaced_deployment(
                name, namespace, body, _content_type=MERGE_PATCH
            )
        except ApiException as exc:
            raise _error(exc, f"deployment {namespace}/{name}") from exc

    async def post_event(
        self,
        namespace: str,
        involved: Mapping[str, str],
        kind: str,
        reason: str,
        message: str,
        component: str,
    ) -> None:
        """A core/v1 Event about `involved` (apiVersion, kind, name, uid)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time: RFC 3339
        body: dict[str, Any] = {
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": {**involved, "namespace": namespace},
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._core.create_namespaced_event(namespace, body)
        except ApiException as exc:
            raise _error(exc, f"event in {namespace}") from exc

    async def read_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = await self._coordination.read_namespaced_lease(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc, f"lease {namespace}/{name}") from exc
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            renew_time=spec.renew_time,
            duration_s=int(spec.lease_duration_seconds or 0),
            resource_version=str(lease.metadata.resource_version),
            transitions=int(spec.lease_transitions or 0),
        )

    async def write_lease(
        self,
        namespace: str,
        name: str,
        holder: str,
        duration_s: int,
        previous: LeaseRecord | None,
        acquired: bool,
    ) -> bool:
        """Create or update the Lease; False if someone else wrote it first (409)."""
        # metav1.MicroTime: RFC 3339 with exactly six fractional digits.
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        transitions = (previous.transitions if previous else 0) + (1 if acquired else 0)
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquired:
            spec["acquireTime"] = now
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        try:
            if previous is None:
                await self._coordination.create_namespaced_lease(
                    namespace, {"metadata": metadata, "spec": spec}
                )
            else:
                metadata["resourceVersion"] = previous.resource_version
                await self._coordination.replace_namespaced_lease(
                    name, namespace, {"metadata": metadata, "spec": spec}
                )
        except ApiException as exc:
            if exc.status in (409, 422):
                return False
            raise _error(exc, f"lease {namespace}/{name}") from exc
        return True


def _error(exc: ApiException, what: str) -> KubeError:
    return KubeError(int(exc.status or 0), f"{what}: {exc.status} {exc.reason}")
