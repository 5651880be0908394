"""The results middleware: the client one refuses a wrong ``result_ttl`` at the push; the server one keeps the
value a job returned, for jobs whose result is wanted, before the job is acknowledged."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext

from .record import check_result_ttl, error_record, result_key, result_ttl, value_record

if TYPE_CHECKING:
    import redis

log = logging.getLogger("kiq.results")


@dataclass(eq=False)
class Watched:
    """The job inside the results layer; ``dropped`` says why, if an inner layer dropped it unrun."""

    job: dict[str, Any]
    dropped: str | None = None


watched: ContextVar[Watched | None] = ContextVar("kiq_results_job", default=None)


def save(redis: redis.Redis, job: dict[str, Any], record: str, ttl: float) -> None:
    redis.set(result_key(redis, str(job.get("jid"))), record, px=max(1, round(ttl * 1000)))


class ResultsClientMiddleware(kiq.ClientMiddleware):
    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        if "result_ttl" in job:
            check_result_ttl(job)
        yield


class ResultsServerMiddleware(kiq.ServerMiddleware):
    """Keeps ``{"value": ...}`` for a job that returned; ``{"error": ...}`` when its value is not strict JSON (the
    job is not retried: running it again would return the same; the worker logs it as failed) or when an inner layer
    dropped it. A job that raised keeps nothing: its retries may still return a value. A Redis error here is the
    job's error, through the retry rules, so the value is not lost silently."""

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        ttl = result_ttl(job, self.config.get("job_result_ttl"))
        if not ttl:
            yield
            return
        watch = Watched(job)
        reset = watched.set(watch)
        try:
            value = yield
        finally:
            watched.reset(reset)
        if watch.dropped is not None:
            save(self.config.redis, job, error_record(f"dropped: {watch.dropped}"), ttl)
            return
        record, problem = value_record(job, value)
        save(self.config.redis, job, record, ttl)
        if problem is not None:
            log.warning("%s", problem)
            kiq.ext.report_failure(f"ResultError: {problem}")
