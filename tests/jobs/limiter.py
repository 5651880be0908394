"""Jobs for tests/plugins/limiter (a worker loads them with ``-r tests.jobs.limiter`` and ``KIQ_PLUGINS=limiter``).

What each run did inside its limiter is written to Redis, with times, where the test reads it back.
"""

from __future__ import annotations

import json
import time

import kiq
from kiq.plugins import limiter

SPANS = "limiter-test:spans"  # LIST of JSON [start, end]: the time each Crowded job spent inside its limiter
GRANTS = "limiter-test:grants"  # LIST of the Redis times at which Windowed jobs were let in
STARTED = "limiter-test:started"  # LIST of JSON [jid, time]: HoldsSlot jobs inside their limiter
HOLD = "limiter-test:hold"  # while this key exists, HoldsSlot keeps its slot
RUNS = "limiter-test:runs"  # LIST of jids of Blocked jobs that got through


def _redis():  # type: ignore[no-untyped-def]
    return kiq.default_config().redis


class Crowded(kiq.Job):
    """Works ``ms`` milliseconds inside a concurrent limiter of 2."""

    kiq_name = "LimiterCrowded"

    def perform(self, ms: int) -> None:
        with limiter.concurrent("crowd", 2, lock_timeout=30, wait_timeout=1):
            started = time.time()
            time.sleep(ms / 1000)
            ended = time.time()
        _redis().rpush(SPANS, json.dumps([started, ended]))


class Windowed(kiq.Job):
    """Lets itself in through a window of 10 per second, waiting as long as it takes."""

    kiq_name = "LimiterWindowed"

    def perform(self) -> None:
        with limiter.window("ten-per-second", 10, 1.0, wait_timeout=30) as lease:
            _redis().rpush(GRANTS, repr(lease.granted_at))


class HoldsSlot(kiq.Job):
    """Takes the only slot of a limiter with a 2 s lock timeout and keeps it while the HOLD key exists."""

    kiq_name = "LimiterHoldsSlot"

    def perform(self) -> None:
        with limiter.concurrent("solo", 1, lock_timeout=2):
            _redis().rpush(STARTED, json.dumps([self.jid, time.time()]))
            deadline = time.monotonic() + 30
            while _redis().exists(HOLD) and time.monotonic() < deadline:
                time.sleep(0.05)


class Blocked(kiq.Job):
    """Needs the only slot of a limiter and does not wait for it."""

    kiq_name = "LimiterBlocked"
    kiq_options = {"retry": 5}

    def perform(self) -> None:
        with limiter.concurrent("blocked", 1, wait_timeout=0):
            _redis().rpush(RUNS, self.jid)
