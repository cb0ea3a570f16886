"""A pool that went silent together: every worker's heartbeat key gone at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any

log = logging.getLogger("fairway.scheduler")


class PoolSilence:
    """Whether to leave the known workers' jobs to their leases because every heartbeat key is
    gone at once, for up to a lease: a host too busy to beat (a lone worker in a long CPU
    prefill let its key expire, and its jobs were re-run from their checkpoints) or a Redis that
    lost its keys. As ``views.live_beats`` leaves a pool that went silent together, its jobs are
    left to their leases; re-queuing them would only repeat work that no other worker is there
    to take. One per leader term: a new term starts with the pool heard."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.since: float | None = None  # every worker's key gone, since when (monotonic)

    def holds(self, beats: list[dict[str, Any]], known: Collection[str]) -> bool:
        """True while the ``known`` workers have all been silent (no ``beats``) for under a
        lease."""
        if beats or not known:
            self.since = None
            return False
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning("no worker heartbeat at all (%d worker(s) known); leaving their jobs "
                        "to their leases", len(known))
        return now - self.since < self.lease_s
