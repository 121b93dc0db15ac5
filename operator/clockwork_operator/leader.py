"""Leader election on a coordination.k8s.io Lease, for the autoscaler: with several
operator replicas only one resizes the worker Deployment. (Kopf's peering pauses the
resource handlers of standby operators, but not background tasks like this one.)

The leader renews every third of the lease duration and considers itself leader only
until `duration - margin` after the renewal it *sent*, so it stops acting before
anyone else may take the lease over (after `duration` past the recorded renewal).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from clockwork_operator.kube import Kube, KubeError, LeaseRecord

log = logging.getLogger(__name__)


class LeaderElection:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration_s = duration_s
        self._monotonic = monotonic
        self._valid_until = 0.0

    @property
    def is_leader(self) -> bool:
        return self._monotonic() < self._valid_until

    async def run(self) -> None:
        while True:
            try:
                await self.attempt()
            except (KubeError, OSError) as exc:
                log.warning("leader election: %s", exc)
            await asyncio.sleep(self._duration_s / 3)

    async def attempt(self) -> bool:
        """One round: acquire or renew the lease if possible. Returns is_leader."""
        sent = self._monotonic()
        record = await self._kube.read_lease(self._namespace, self._name)
        if record is not None and record.holder != self.identity and not _expired(record):
            self._valid_until = 0.0
            return False
        acquired = record is None or record.holder != self.identity
        written = await self._kube.write_lease(
            self._namespace, self._name, self.identity, self._duration_s, record, acquired
        )
        if not written:
            self._valid_until = 0.0
            return False
        if acquired:
            log.info("leader election: %s now holds %s", self.identity, self._name)
        margin = max(1.0, self._duration_s / 5)
        self._valid_until = sent + self._duration_s - margin
        return True


def _expired(record: LeaseRecord) -> bool:
    if record.renew_time is None or not record.holder:
        return True
    renewed = record.renew_time
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=UTC)
    return (datetime.now(UTC) - renewed).total_seconds() > record.duration_s
