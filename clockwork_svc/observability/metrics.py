"""Prometheus metrics (the only module that imports prometheus_client).

Each process builds one `Metrics` with its own registry and passes it to the parts
that record; nothing registers into a global default registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LAG_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.schedules_created = Counter(
            "clockwork_schedules_created_total",
            "Schedules created (not counting idempotent repeats)",
            registry=r,
        )
        self.create_batch = Histogram(
            "clockwork_create_batch_creates",
            "Unary creates of one tenant sent together as one batch (create_batching): "
            "the larger, the more of them share each partition's Paxos round",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000),
            registry=r,
        )
        self.api_requests = Counter(
            "clockwork_api_requests_total",
            "gRPC requests by method and status code",
            ["method", "code"],
            registry=r,
        )
        self.api_in_flight = Gauge(
            "clockwork_api_in_flight", "gRPC calls being handled (admitted)", registry=r
        )
        self.api_refused = Counter(
            "clockwork_api_refused_total",
            "gRPC calls refused UNAVAILABLE because the api was at --max-in-flight",
            registry=r,
        )
        self.firings = Counter(
            "clockwork_firings_total",
            "Firings handled, by outcome (failed: for good, dead-lettered) and tenant",
            ["outcome", "tenant"],
            registry=r,
        )
        self.occurrences_missed = Counter(
            "clockwork_occurrences_missed_total",
            "Occurrences not sent, by tenant and reason: overlap (the previous delivery "
            "still ran), misfire (missed while no worker fired them), expired (past the "
            "relevancy window)",
            ["tenant", "reason"],
            registry=r,
        )
        self.fire_lag = Histogram(
            "clockwork_fire_lag_seconds",
            "Delivery start minus due time",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.read_late = Histogram(
            "clockwork_schedule_read_late_seconds",
            "How far past the due time a firing's schedule read (made ahead of it) returned:"
            " 0 when in time; above 0 it is part of the firing's lag",
            buckets=(0.0, *LAG_BUCKETS),
            registry=r,
        )
        self.delivery_duration = Histogram(
            "clockwork_delivery_duration_seconds", "Callback request duration", registry=r
        )
        self.due_backlog = Gauge(
            "clockwork_due_backlog", "Firings prefetched or in flight on this worker", registry=r
        )
        self.shards_owned = Gauge("clockwork_shards_owned", "Shards this worker owns", registry=r)
        self.shard_count = Gauge(
            "clockwork_shards_total",
            "Shards in the cluster (its layout): with clockwork_shards_owned summed over the "
            "workers, how many no live worker owns",
            registry=r,
        )
        self.store_errors = Counter(
            "clockwork_store_errors_total",
            "Store calls that failed and will be retried",
            ["operation"],
            registry=r,
        )
        self.ownership_changes = Counter(
            "clockwork_shard_ownership_changes_total",
            "Shards acquired, released or lost by this worker",
            ["change"],
            registry=r,
        )
        self.keepalive_latency = Histogram(
            "clockwork_lease_keepalive_seconds",
            "etcd lease keepalive round trip",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.rebalance_duration = Histogram(
            "clockwork_rebalance_seconds",
            "Duration of rebalance rounds that moved shards",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "clockwork_event_loop_lag_seconds",
            "How late the event loop runs a timer",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.gc_pause = Histogram(
            "clockwork_gc_pause_seconds",
            "Cyclic garbage collections (the whole process stops), by generation",
            ["generation"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.host_clock_skew = Gauge(
            "clockwork_host_clock_skew_seconds",
            "This host's wall clock minus cluster time (the store's clock), when in use",
            registry=r,
        )
        self.fenced = Counter(
            "clockwork_shard_fenced_total",
            "Shards dropped because a newer epoch owns them",
            registry=r,
        )

    def gc_paused(self, generation: int, seconds: float) -> None:
        self.gc_pause.labels(str(generation)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
