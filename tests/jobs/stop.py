"""Jobs that ignore a stop (``-r tests.jobs.stop``), for the stop timing tests: each records its start, then sleeps
in C (``time.sleep``), where neither a thread interrupt nor a task cancel reaches it."""

from __future__ import annotations

import time

import kiq

STARTED = "stop-test:started"  # LIST of the jids that started


class Stubborn(kiq.Job):
    kiq_name = "StopStubborn"

    def perform(self, seconds: float) -> None:
        kiq.default_config().redis.rpush(STARTED, self.jid)
        time.sleep(seconds)


class StubbornAsync(kiq.Job):
    """Blocks its event loop: the cancel of a hard shutdown cannot reach it either."""

    kiq_name = "StopStubbornAsync"

    async def perform(self, seconds: float) -> None:
        kiq.default_config().redis.rpush(STARTED, self.jid)
        time.sleep(seconds)  # on purpose: a coroutine that blocks its loop


class HangingShutdown:
    """A plugin whose shutdown hook hangs (a flush to a service that is down, say)."""

    @kiq.hookimpl
    def kiq_shutdown(self, config: kiq.Config) -> None:
        time.sleep(120)
