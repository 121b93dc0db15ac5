"""The operator's settings (from its command line / environment, see __main__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clockwork_operator.autoscale import ScalePolicy
from clockwork_svc.api import DEFAULT_ADDRESS


@dataclass(frozen=True, slots=True)
class ApiConnection:
    server: str = DEFAULT_ADDRESS
    # The admin token: GetClusterLoad, and acting for a tenant that has no Secret.
    admin_token: str = ""
    ca_file: Path | None = None
    timeout_s: float = 15.0


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    """Sizes the worker Deployment `namespace/deployment`; off without a deployment."""

    namespace: str = ""
    deployment: str = ""
    policy: ScalePolicy = field(default_factory=ScalePolicy)
    interval_s: float = 15.0
    lease_name: str = "clockwork-autoscaler"
    lease_duration_s: int = 15

    @property
    def enabled(self) -> bool:
        return bool(self.namespace and self.deployment)


@dataclass(frozen=True, slots=True)
class KopfSettings:
    """How Kopf runs the handlers."""

    # The peering object: one active operator among replicas.
    peering: str = "clockwork"
    priority: int = 0
    # Liveness endpoint URL ('' disables it).
    liveness: str = "http://0.0.0.0:8080/healthz"
    log_level: str = "INFO"


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    api: ApiConnection = field(default_factory=ApiConnection)
    autoscale: AutoscaleSettings = field(default_factory=AutoscaleSettings)
    # A resource without spec.tenantSecretRef acts for this tenant with the admin
    # token; empty: for the tenant named like the resource's namespace.
    default_tenant: str = ""
    status_interval_s: float = 30.0
    identity: str = "clockwork-operator"
    # Reconciles against the Clockwork API at once and a second (each one to three
    # calls): a flood of resources arrives as a steady stream.
    max_concurrent_reconciles: int = 16
    api_rate_per_s: float = 100.0
