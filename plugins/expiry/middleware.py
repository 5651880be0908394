"""Expiring jobs: ``expires_in`` becomes an absolute ``expires_at`` at the push, and a worker drops a job whose
``expires_at`` has passed before the job starts.

The deadline is written into the payload once, at the first push, counted from when the job is due (now, or its
``at`` for a scheduled job); later pushes of the same job (the poller moving it to its queue, a retry) keep it, so it
applies to every run, retries included. A dropped job is acknowledged, logged, counted in Redis and announced with
the ``kiq_job_dropped`` hook; it is not a failure: no retry, no dead set, no death hooks.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

import redis as redis_py

import kiq
import kiq.ext

if TYPE_CHECKING:
    import redis

log = logging.getLogger("kiq.expiry")

EXPIRED = "kiq:expiry:expired"  # HASH: job class -> jobs dropped because their deadline had passed


def deadline(job: dict[str, Any], now: float) -> float | None:
    """The ``expires_at`` a job being pushed gets from its ``expires_in`` (None: it does not expire). A wrong value
    is refused at the push (``kiq.InvalidJobError``)."""
    expires_in = job.get("expires_in")
    if expires_in is None:
        return None
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or not 0 < expires_in < math.inf:
        raise kiq.InvalidJobError(
            f"{job.get('class')}: option 'expires_in' must be a number of seconds > 0, got {expires_in!r:.80}"
        )
    at = job.get("at")  # checked by the client already: a finite number when present
    due = max(now, at) if isinstance(at, int | float) else now
    return due + float(expires_in)


class ExpiryClientMiddleware(kiq.ClientMiddleware):
    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        if "expires_at" not in job:
            expires_at = deadline(job, time.time())
            if expires_at is not None:
                job["expires_at"] = expires_at
        yield


class ExpiryServerMiddleware(kiq.ServerMiddleware):
    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        expires_at = job.get("expires_at")
        if expires_at is None:
            yield
            return
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float) or math.isnan(expires_at):
            log.warning("%s %s: ignoring an unusable expires_at %r; the job runs", job.get("class"), job.get("jid"),
                        expires_at)  # fmt: skip
            yield
            return
        late = time.time() - expires_at
        if late <= 0:
            yield
            return
        reason = f"expired: its deadline passed {late:.3f} s before it could start"
        log.info("%s %s %s; dropped without running", job.get("class"), job.get("jid"), reason)
        try:
            self.config.redis.hincrby(kiq.ext.keyspace(self.config.redis).key(EXPIRED), str(job.get("class")), 1)
        except redis_py.RedisError as exc:  # the count is a statistic: the job is dropped all the same
            log.warning("could not count the expired job %s: %s", job.get("jid"), exc)
        self.config.plugins.notify("kiq_job_dropped", job=job, reason=reason, config=self.config)
        # returning without yielding: the job is not performed, and is acknowledged like a finished one
