"""Reliable fetch: no job is lost when a worker process is killed (``fetch = "reliable"``).

The plugin declares the settings and builds a fetcher per capsule; the fetcher itself keeps the process's
liveness key fresh and recovers the jobs of dead processes on every heartbeat (the lease lets one process of the
fleet do it per ``reliable_recovery_interval``). See the README, "Reliable fetch".
"""

from __future__ import annotations

import kiq
import kiq.ext

from .fetch import ReliableFetch, ReliableUnit
from .liveness import Liveness
from .recovery import InterruptedJobError, Recovery, recover_orphans

__all__ = ["InterruptedJobError", "Recovery", "ReliableFetch", "ReliableFetchPlugin", "ReliableUnit", "recover_orphans"]

SETTINGS = [
    kiq.ext.Setting.integer(
        "reliable_max_interrupts",
        3,
        minimum=1,
        help="a job whose worker dies this many times while running it goes to dead (per job: max_interrupts)",
    ),
    kiq.ext.Setting.integer(
        "reliable_batch_size", 10, minimum=1, help="most jobs one reliable fetch moves per round trip"
    ),
    kiq.ext.Setting.integer(
        "reliable_prefetch",
        0,
        minimum=0,
        help="jobs a fetch may move beyond the idle threads while the queues keep a backlog (0: none): fewer round "
        "trips in a drain; a prefetched job waits behind the running ones, and counts as interrupted if its worker "
        "dies before it starts",
    ),
    kiq.ext.Setting.number(
        "reliable_recovery_interval", 30.0, minimum=0.5, help="seconds between orphan recoveries across the fleet"
    ),
]


class ReliableFetchPlugin:
    """Provides the ``reliable`` fetcher (one per config; it owns the process's liveness key)."""

    def __init__(self) -> None:
        self._liveness: dict[str, Liveness] = {}  # by process identity: the capsules' fetchers share it

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_fetcher(self, name: str, config: kiq.Config, capsule: kiq.ext.Capsule) -> ReliableFetch | None:
        if name != "reliable":
            return None
        liveness = self._liveness.get(capsule.identity)
        if liveness is None:
            liveness = self._liveness[capsule.identity] = Liveness(config, capsule.identity)
        return ReliableFetch(capsule, liveness)
