"""gRPC clients per tenant credential: a resource's `spec.tenantSecretRef` Secret, or
the admin token acting for a tenant. Clients are reused while the credential is."""

from __future__ import annotations

from dataclasses import dataclass

from clockwork_operator.config import OperatorConfig
from clockwork_operator.kube import Kube, KubeError
from clockwork_operator.resource import SecretRef
from clockwork_svc.client import ClientSettings, ClockworkClient


class CredentialError(Exception):
    """The credential for a resource cannot be found or is unusable."""


@dataclass(frozen=True, slots=True)
class Credential:
    token: str
    tenant: str | None  # sent as clockwork-tenant metadata (needed with the admin token)


class Clients:
    def __init__(self, config: OperatorConfig, kube: Kube) -> None:
        self._config = config
        self._kube = kube
        self._clients: dict[Credential, ClockworkClient] = {}

    async def credential(self, namespace: str, ref: SecretRef | None) -> Credential:
        if ref is None:
            if not self._config.api.admin_token:
                raise CredentialError(
                    "spec.tenantSecretRef is not set and the operator has no admin token"
                )
            return Credential(self._config.api.admin_token, self.default_tenant(namespace))
        try:
            data = await self._kube.secret_data(namespace, ref.name)
        except KubeError as exc:
            raise CredentialError(f"spec.tenantSecretRef: {exc}") from exc
        token = data.get(ref.token_key, "").strip()
        if not token:
            raise CredentialError(
                f"spec.tenantSecretRef: secret {ref.name} has no key {ref.token_key!r}"
            )
        return Credential(token, data.get(ref.tenant_key, "").strip() or None)

    def admin(self, tenant: str | None = None) -> ClockworkClient:
        return self.client(Credential(self._config.api.admin_token, tenant))

    def default_tenant(self, namespace: str) -> str:
        return self._config.default_tenant or namespace

    def client(self, credential: Credential) -> ClockworkClient:
        existing = self._clients.get(credential)
        if existing is None:
            api = self._config.api
            existing = ClockworkClient(
                ClientSettings(
                    server=api.server,
                    tenant=credential.tenant,
                    token=credential.token or None,
                    ca_file=api.ca_file,
                    timeout_s=api.timeout_s,
                )
            )
            self._clients[credential] = existing
        return existing

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()
