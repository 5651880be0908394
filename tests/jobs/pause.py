"""Jobs for the queue pause tests (``-r tests.jobs.pause``): each records when it started, from which queue, and
that it finished, in the worker's Redis, where the test reads it back."""

from __future__ import annotations

import asyncio
import json
import time

import kiq

STARTS = "pause-test:starts"  # LIST of JSON [queue, jid, epoch seconds at the start of perform]
DONE = "pause-test:done"  # SET of jids that finished at least once


def _started(job: kiq.Job) -> None:
    kiq.default_config().redis.rpush(STARTS, json.dumps([job.job["queue"], job.jid, time.time()]))


class Stamp(kiq.Job):
    """Records its start, takes ``ms`` milliseconds, records its end."""

    kiq_name = "PauseStamp"

    def perform(self, ms: int) -> None:
        _started(self)
        time.sleep(ms / 1000)
        kiq.default_config().redis.sadd(DONE, self.jid)


class AsyncStamp(kiq.Job):
    """Stamp as a coroutine: fetched by the same threads, run on the capsule's event loop."""

    kiq_name = "PauseAsyncStamp"

    async def perform(self, ms: int) -> None:
        _started(self)
        await asyncio.sleep(ms / 1000)
        kiq.default_config().redis.sadd(DONE, self.jid)
