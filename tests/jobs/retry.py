"""Jobs and a death-recording plugin for tests/server/test_retry_e2e.py (a worker loads them with
``-r tests.jobs.retry``).

Every attempt and every death is written to Redis, where the test reads it back.
"""

from __future__ import annotations

import json
from typing import Any

import kiq

ATTEMPTS = "retry-test:attempts"  # LIST of jids, one entry per perform
DONE = "retry-test:done"  # LIST of jids that succeeded
DEATHS = "retry-test:deaths"  # LIST of JSON {"jid", "error_class", "retry_count", "exc"} per death hook call


def _record_attempt(jid: str) -> int:
    redis = kiq.default_config().redis
    redis.rpush(ATTEMPTS, jid)
    return sum(1 for seen in redis.lrange(ATTEMPTS, 0, -1) if seen == jid)


class AlwaysFails(kiq.Job):
    """Fails every time; retries come after 1 s (plus Sidekiq's jitter), so retry counts are quick to reach."""

    kiq_options = {"retry": 2, "backtrace": 5}

    def perform(self, *args: Any) -> None:
        _record_attempt(self.jid)
        raise ValueError(f"always fails: {args}")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1


class FailsOnce(kiq.Job):
    """Fails on its first attempt only; asks to be retried after 1 s."""

    def perform(self, *args: Any) -> None:
        if _record_attempt(self.jid) == 1:
            raise RuntimeError("first attempt fails")
        kiq.default_config().redis.rpush(DONE, self.jid)

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1


class DeathRecorder:
    """A kiq_death hook that writes what it saw to Redis."""

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        record = {
            "jid": job.get("jid"),
            "error_class": job.get("error_class"),
            "retry_count": job.get("retry_count"),
            "exc": type(exc).__name__ if exc is not None else None,
        }
        config.redis.rpush(DEATHS, json.dumps(record))


@kiq.configure_server
def register_death_recorder(config: kiq.Config) -> None:
    config.plugins.register(DeathRecorder())
