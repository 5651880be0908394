"""Liveness of a worker's own loops, for ``/livez``: the heartbeat and the scheduled-job poller, as the
``kiq_loop_tick`` hook reports them.

A loop *ticks* each time it comes round and says by when it will tick next (``due_within``: 0 as its work begins,
its wait after it). The worker is live while no loop is late by more than ``liveness_timeout`` seconds: a
heartbeat stuck in a hung call, a poller thread that died or deadlocked. Redis being unreachable does not make a
loop late (its calls fail fast and the loop goes round), so an outage fails readiness, never liveness; a loop that
ended on purpose (``due_within`` None: the poller of a quiet worker, everything of a stopped one) is never late.

Why the hook says when the next tick is due rather than the plugin guessing it: the poller's wait is random and
grows with the number of processes in the fleet (Sidekiq's rule, kiq.server.scheduled), so no fixed bound would
fit both a small and a large fleet.
"""

from __future__ import annotations

import math
import time

import kiq

# A worker whose heartbeat is this many intervals late is taken for dead by the fleet: reliable fetch recovers its
# jobs for others to run (kiq.plugins.reliable_fetch's liveness TTL is three heartbeats). /livez fails at the same
# moment by default, so a hung worker is restarted as its jobs are taken over, not half a minute later.
HEARTBEATS = 3
# ...but never sooner than this: a swarm child writes its snapshot every second (swarm.py), and a loop of a busy
# process may come round a little late; only a heartbeat_interval under 5/3 s makes the floor count
LIVENESS_FLOOR = 5.0


def liveness_timeout(config: kiq.Config) -> float:
    """The ``liveness_timeout`` setting; 0 (the default): ``HEARTBEATS`` times ``heartbeat_interval`` (30 s), at
    least ``LIVENESS_FLOOR``."""
    configured = float(config.get("liveness_timeout"))
    return configured if configured > 0 else max(HEARTBEATS * config.heartbeat_interval, LIVENESS_FLOOR)


class Liveness:
    """When each loop is due to tick next (monotonic seconds); a loop not yet seen is not late."""

    def __init__(self) -> None:
        self.due: dict[str, float] = {}  # written by each loop's own thread, read by the port's

    def tick(self, name: str, due_within: float | None) -> None:
        """The loop ``name`` came round; it will again within ``due_within`` seconds plus the time of its work
        (None: it ended on purpose)."""
        self.due[name] = math.inf if due_within is None else time.monotonic() + due_within

    def stale(self, timeout: float) -> list[str]:
        """What fails liveness: one line per loop late by more than ``timeout`` seconds, else nothing."""
        now = time.monotonic()
        return [
            f"the {name} loop has not ticked for {late:.0f} s past its due time (liveness_timeout {timeout:g} s)"
            for name, due in sorted(self.due.copy().items())
            if (late := now - due) > timeout
        ]
