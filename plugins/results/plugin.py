"""The results plugin: its setting and option, its middleware, and the records of jobs that end without a value."""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from .middleware import ResultsClientMiddleware, ResultsServerMiddleware, save, watched
from .record import error_record, result_ttl, value_record

SETTINGS = [
    kiq.ext.Setting.number(
        "job_result_ttl", 0.0, help="seconds every job's return value is kept; 0: only jobs with the result_ttl option"
    ),
]


class ResultsPlugin:
    """``plugins = ["results"]`` in the workers (they keep the values) and in the processes that push jobs with
    ``result_ttl`` (a wrong value is refused at the push)."""

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["result_ttl"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(ResultsClientMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(ResultsServerMiddleware)

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        """A job that died will not return a value: a waiting reader learns it now, not at its timeout."""
        ttl = result_ttl(job, config.get("job_result_ttl"))
        if ttl:
            error = f"{kiq.ext.error_class(exc)}: {exc}" if exc is not None else str(job.get("error_message") or "")
            save(config.redis, job, error_record(f"died: {error}"), ttl)

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], reason: str, config: kiq.Config) -> None:
        watch = watched.get()
        if watch is not None and watch.job is job:  # dropped inside the results layer, which records it
            watch.dropped = reason
            return
        ttl = result_ttl(job, config.get("job_result_ttl"))
        if ttl:
            save(config.redis, job, error_record(f"dropped: {reason}"), ttl)


def tracked_result(job: dict[str, Any], value: Any, config: kiq.Config) -> str | None:
    """The result record the tracking plugin stores with a finished job's event: when the results plugin keeps this
    job's result (None otherwise)."""
    if config.plugins.find(ResultsPlugin) is None or not result_ttl(job, config.get("job_result_ttl")):
        return None
    return value_record(job, value)[0]
