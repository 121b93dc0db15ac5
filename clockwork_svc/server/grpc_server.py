"""Builds the grpc.aio server: scheduler, tenant and cluster services, health, reflection,
auth, TLS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from clockwork_svc.api.v1 import cluster_pb2, cluster_pb2_grpc, tenants_pb2, tenants_pb2_grpc
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.cluster_load import LoadSource, NoLoad
from clockwork_svc.dead_letters import DeadLetters
from clockwork_svc.observability.metrics import Metrics
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.scheduling import Scheduling
from clockwork_svc.server.admission import Admission
from clockwork_svc.server.auth import Authenticator, AuthSettings, TokenLookup
from clockwork_svc.server.call_pipeline import CallPipeline
from clockwork_svc.server.cluster_servicer import ClusterServicer
from clockwork_svc.server.local_calls import HandlerRecorder, LocalCalls
from clockwork_svc.server.servicer import SchedulerServicer
from clockwork_svc.server.tenant_servicer import TenantServicer
from clockwork_svc.tenancy import TenantAdmin

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SchedulerService"].full_name
TENANT_SERVICE_NAME = tenants_pb2.DESCRIPTOR.services_by_name["TenantService"].full_name
CLUSTER_SERVICE_NAME = cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name
SERVICES = (
    pb.DESCRIPTOR.services_by_name["SchedulerService"],
    tenants_pb2.DESCRIPTOR.services_by_name["TenantService"],
    cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"],
)
"""The v1 services, as the HTTP gateway and the OpenAPI document read them."""
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The default limit on a request or response (`--max-message-size`)."""
MAX_IN_FLIGHT = 512
"""The default limit on calls handled at once (`--max-in-flight`); above it, calls are
refused UNAVAILABLE with a retry hint (clockwork_svc/server/admission.py)."""
# gRPC core queues calls the application has not picked up yet and drops some past
# 1,000 waiting, and any after 30 s waiting, as CANCELLED (neither applied nor
# retryable as far as the client can tell). The api picks calls up as fast as it can
# refuse them; both limits are raised out of the way so that every call gets its
# answer from the admission check (or meets its own deadline).
_CORE_PENDING_LIMIT = 1_000_000
_CORE_PENDING_S = 24 * 3600


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    # With a client CA, clients must present a certificate it signed (mutual TLS).
    client_ca_file: Path | None = None


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health_aio.HealthServicer
    # The same services, called from inside the process (the HTTP gateway).
    local_calls: LocalCalls

    async def stop(self, grace_s: float) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


async def start_server(
    scheduling: Scheduling,
    dead_letters: DeadLetters,
    tenant_admin: TenantAdmin,
    tokens: TokenLookup,
    metrics: Metrics,
    listen: str,
    auth: AuthSettings,
    tls: TlsSettings | None = None,
    load: LoadSource | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_in_flight: int = MAX_IN_FLIGHT,
    tracing: Tracing | None = None,
) -> RunningServer:
    admission = Admission(max_in_flight)
    metrics.api_in_flight.set_function(lambda: admission.in_flight)
    # Admit, authenticate, decode, continue the caller's trace (call_pipeline.py).
    interceptors: list[grpc.aio.ServerInterceptor] = [
        CallPipeline(
            admission, metrics.api_refused.inc, Authenticator(auth, tokens), tracing or Tracing()
        )
    ]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.server.max_pending_requests", _CORE_PENDING_LIMIT),
            ("grpc.server.max_pending_requests_hard_limit", _CORE_PENDING_LIMIT),
            ("grpc.server_max_unrequested_time_in_server", _CORE_PENDING_S),
            # HTTP/2 flow control: one connection has at most this many calls open here;
            # its client holds the rest until one ends. That bounds what a burst
            # queues in this process (its memory, and the wait of a health check
            # sent behind it) by the connections, not by the calls. Overload
            # protection is off: it counts a call until its memory is reclaimed and
            # refuses the next ones with REFUSED_STREAM (UNAVAILABLE without a retry
            # hint) while the client still sees room.
            ("grpc.max_concurrent_streams", max_in_flight),
            ("grpc.http.overload_protection", 0),
        ],
    )
    servicers = (
        SchedulerServicer(scheduling, dead_letters, metrics),
        TenantServicer(tenant_admin, metrics),
        ClusterServicer(load or NoLoad(), metrics),
    )
    recorder = HandlerRecorder()
    for target in (server, recorder):
        _add_services(servicers, target)
    # One pipeline for both: it keeps the first handler it composes for a method, and
    # the server's and the recorder's handlers of a method wrap the same servicer method.
    local_calls = LocalCalls(recorder.handlers, interceptors, max_message_bytes)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [
            SERVICE_NAME,
            TENANT_SERVICE_NAME,
            CLUSTER_SERVICE_NAME,
            health.SERVICE_NAME,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        credentials = grpc.ssl_server_credentials(
            [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
            root_certificates=tls.client_ca_file.read_bytes() if tls.client_ca_file else None,
            require_client_auth=tls.client_ca_file is not None,
        )
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    for name in ("", SERVICE_NAME, TENANT_SERVICE_NAME, CLUSTER_SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, health_servicer, local_calls)


def _add_services(
    servicers: tuple[SchedulerServicer, TenantServicer, ClusterServicer], server: Any
) -> None:
    scheduler, tenants, cluster = servicers
    pb_grpc.add_SchedulerServiceServicer_to_server(scheduler, server)
    tenants_pb2_grpc.add_TenantServiceServicer_to_server(tenants, server)
    cluster_pb2_grpc.add_ClusterServiceServicer_to_server(cluster, server)
