"""The two middleware of unique jobs: the client one takes the lock at the push (or drops the push), the server one
releases it when the job succeeded (``unique_until: "success"``, the default) or when it starts (``"start"``)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import kiq

from .lock import lock_key, lock_ttl

if TYPE_CHECKING:
    import redis

    from .plugin import UniquePlugin

log = logging.getLogger("kiq.unique")


class UniqueClientMiddleware(kiq.ClientMiddleware):
    def __init__(self, plugin: UniquePlugin) -> None:
        self.plugin = plugin

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        if "unique_key" in job:  # pushed again (a due scheduled job, a retry): it took its lock at its first push
            yield
            return
        ttl = lock_ttl(job, time.time())
        if ttl is None:
            yield
            return
        try:
            key = lock_key(job["class"], job["queue"], job["args"], job.get("kwargs"))
        except (TypeError, ValueError, RecursionError):
            yield  # arguments that are not JSON: the push's own check refuses them, with a clearer message
            return
        jid = job["jid"]
        if not self.plugin.locks(redis).acquire(redis, key, jid, ttl, job["class"]):
            log.debug("%s: not pushed, a job with the same arguments holds the unique lock %s", job["class"], key)
            return
        job["unique_key"] = key  # the release and the pushes that follow (schedule, retries) find the lock by it
        self.plugin.taken(redis, key, jid)
        try:
            pushed = yield
        except BaseException:  # refused (a bad argument) or not written (Redis): nothing holds the lock
            self.plugin.release(redis, key, jid)
            raise
        if pushed is None:  # an inner middleware dropped the job
            self.plugin.release(redis, key, jid)


class UniqueServerMiddleware(kiq.ServerMiddleware):
    def __init__(self, plugin: UniquePlugin) -> None:
        self.plugin = plugin

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        key = job.get("unique_key")
        if not isinstance(key, str):
            yield
            return
        jid = str(job.get("jid"))
        if job.get("unique_until") == "start":
            self.plugin.release(self.config.redis, key, jid)
            yield
            return
        yield  # a failure is raised here and passes through: the lock stays through the retries, up to its TTL
        self.plugin.release(self.config.redis, key, jid)  # succeeded, or an inner middleware dropped it: gone for good
