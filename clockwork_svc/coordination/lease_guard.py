"""Local lease safety: when may this worker still act on its etcd lease?

etcd grants the TTL from when it processes a keepalive, which is after the worker
sent it; measuring the deadline from the *send* time (monotonic clock) therefore never
overestimates it. The worker stops dispatching `margin_s` before that deadline, and at
once on any keepalive error, so a slow or partitioned worker gives up its shards before
etcd can hand them to someone else. A paused process is not covered by this (it
cannot check anything while paused): the storage epoch fences it instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class LeaseGuard:
    ttl_s: float
    margin_s: float
    _deadline: float = -math.inf
    _sent_at: float | None = None

    def keepalive_sent(self, now: float) -> None:
        self._sent_at = now

    def keepalive_acked(self, granted_ttl_s: float) -> None:
        """A keepalive answered: the lease lives until send time + granted TTL."""
        if self._sent_at is None:
            return
        if granted_ttl_s <= 0:  # etcd answers TTL 0 for a lease it no longer has
            self.lost()
            return
        self._deadline = max(self._deadline, self._sent_at + granted_ttl_s)
        self._sent_at = None

    def granted(self, at: float, ttl_s: float) -> None:
        """A new lease, granted by a request sent at `at`."""
        self._deadline = at + ttl_s
        self._sent_at = None

    def lost(self) -> None:
        self._deadline = -math.inf
        self._sent_at = None

    def valid(self, now: float) -> bool:
        return now < self._deadline - self.margin_s

    def remaining(self, now: float) -> float:
        return self._deadline - now
