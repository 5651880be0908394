"""Jobs for tests/server/test_outcomes.py: each touches Redis (as a cache or a limiter would) and raises when Redis
is down or refuses writes; a run that got through adds its jid to ``DONE``."""

from __future__ import annotations

import time

import kiq
from kiq.plugins import limiter

DONE = "outcomes-test:done"  # SET of the jids of runs that got through


def _redis():  # type: ignore[no-untyped-def]
    return kiq.default_config().redis


class TouchesRedis(kiq.Job):
    """Works ``ms`` milliseconds, then writes to Redis (``SADD``: refused at maxmemory, fails while Redis is down)."""

    kiq_name = "OutcomesTouchesRedis"

    def perform(self, ms: int) -> None:
        time.sleep(ms / 1000)
        _redis().sadd(DONE, self.jid)


class Limited(kiq.Job):
    """Works ``ms`` milliseconds inside a concurrent limiter (wider than the worker, so it never makes a job wait)."""

    kiq_name = "OutcomesLimited"

    def perform(self, ms: int) -> None:
        with limiter.concurrent("outcomes-test", 50, lock_timeout=30, wait_timeout=5):
            time.sleep(ms / 1000)
        _redis().sadd(DONE, self.jid)


DEATHS = "outcomes-test:deaths"  # SET of the jids the DeathRecorder plugin heard of


class Unretried(TouchesRedis):
    """``TouchesRedis`` with ``retry: False``: a failure goes straight to the death hooks (no retry, no dead set)."""

    kiq_name = "OutcomesUnretried"
    kiq_options = {"retry": False}


class DeathRecorder:
    """A plugin whose ``kiq_death`` hook writes to Redis, as an audit log or a batch's bookkeeping would."""

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, object], config: kiq.Config) -> None:
        config.redis.sadd(DEATHS, str(job["jid"]))
