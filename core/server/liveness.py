"""Liveness of a worker's own loops, for ``/livez``: the heartbeat and the scheduled-job poller.

A loop *ticks* each time it comes round and says by when it will tick next (``tick(within)``: after its wait).
The worker is live while no loop is late by more than ``liveness_timeout`` seconds: a heartbeat stuck in a hung
call, a poller thread that died or deadlocked. Redis being unreachable does not make a loop late (its calls fail
fast and the loop goes round), so an outage fails readiness, never liveness; a loop that ended on purpose (the
poller of a quiet worker, everything of a stopped one) is ``done``, never late.
"""

from __future__ import annotations

import math
import time


class LoopWatch:
    """When one loop is due to tick next (monotonic seconds)."""

    __slots__ = ("due", "name")

    def __init__(self, name: str, first_within: float = 0.0) -> None:
        self.name = name
        self.due = time.monotonic() + first_within

    def tick(self, within: float = 0.0) -> None:
        """The loop came round; it will again within ``within`` seconds (its wait), plus the time of its work."""
        self.due = time.monotonic() + within

    def done(self) -> None:
        """The loop ended on purpose: never late again."""
        self.due = math.inf

    def late(self, now: float) -> float:
        """Seconds past the time this loop should have ticked (negative: not yet due)."""
        return now - self.due


def stale_loops(watches: list[LoopWatch], timeout: float) -> list[str]:
    """What fails liveness: one line per loop late by more than ``timeout`` seconds, else nothing."""
    now = time.monotonic()
    return [
        f"the {watch.name} loop has not ticked for {late:.0f} s past its due time (liveness_timeout {timeout:g} s)"
        for watch in watches
        if (late := watch.late(now)) > timeout
    ]
