"""Over the limit, a job is rescheduled, not failed: the limiter plugin's server middleware catches ``OverLimit``
and writes the same payload (same jid, same ``retry_count``) into the ``schedule`` set with a backoff, so the job is
acknowledged, its retries are untouched and it does not count as failed (Sidekiq Enterprise's rule).

The payload's ``overrated`` counts the reschedules; past ``limiter_max_reschedules`` the ``OverLimit`` goes on to the
retry rules like any error. The delay grows with it: ``limiter_backoff * overrated`` plus up to one more
``limiter_backoff`` at random, so jobs that met a full limiter together do not all come back together.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import redis as redis_py

import kiq
import kiq.ext
from kiq.api import ScheduledSet

from .limiters import OverLimit
from .scripts import OVERRATED

log = logging.getLogger("kiq.limiter")


def reschedules_so_far(job: dict[str, Any]) -> int:
    count = job.get("overrated")  # untrusted, like every payload field: anything but a count is a fresh start
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0


class OverLimitMiddleware(kiq.ServerMiddleware):
    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        try:
            yield
        except OverLimit as over:
            overrated = reschedules_so_far(job) + 1
            if overrated > self.config.get("limiter_max_reschedules"):
                raise  # rescheduled often enough: now it is an error, with the usual retries
            self.reschedule(job, over, overrated)

    def reschedule(self, job: dict[str, Any], over: OverLimit, overrated: int) -> None:
        backoff = self.config.get("limiter_backoff")
        delay = backoff * overrated + random.uniform(0, backoff)
        # as a scheduled job is stored: no enqueued_at until the poller enqueues it again
        payload = {key: value for key, value in job.items() if key != "enqueued_at"}
        payload["overrated"] = overrated
        ScheduledSet(self.config).schedule(time.time() + delay, payload)
        try:
            redis = self.config.redis
            redis.hincrby(kiq.ext.keyspace(redis).key(OVERRATED), over.limiter.field, 1)
        except redis_py.RedisError as exc:  # a statistic: the job is rescheduled, it must not fail now
            log.warning("could not count a reschedule of %s: %s", over.limiter.describe(), exc)
        log.info("%s %s: %s; rescheduled in %.1f s (%d of at most %d times)", job.get("class"), job.get("jid"),
                 over, delay, overrated, self.config.get("limiter_max_reschedules"))  # fmt: skip
