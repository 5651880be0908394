"""Retries with a real ``kiq worker``: failures land in ``retry``/``dead`` with Sidekiq's fields, the poller runs
retries again, and the death hook hears of every death."""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Callable
from typing import Any

import redis

import kiq
from tests.jobs.retry import ATTEMPTS, DEATHS, DONE, AlwaysFails, FailsOnce
from tests.support import WorkerProcess, make_retries_due, wait_until

StartWorker = Callable[..., WorkerProcess]


def start(start_worker: StartWorker) -> WorkerProcess:
    # a short poll interval so that retries made due by hand (make_retries_due: no wake-up is published) are
    # picked up within about a quarter second
    return start_worker("-r", "tests.jobs.retry", "-q", "default", "-c", "2", env={"KIQ_POLL_INTERVAL": "0.2"})


def set_entries(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(member) for member in r.zrange(key, 0, -1)]


def deaths(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(item) for item in r.lrange(DEATHS, 0, -1)]


def attempts(r: redis.Redis, jid: str | None) -> int:
    return sum(1 for seen in r.lrange(ATTEMPTS, 0, -1) if seen == jid)


def test_failing_job_appears_in_retry_with_all_fields(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    before = time.time()
    jid = AlwaysFails.set(retry_queue="default", tags=["t"]).perform_async(7, "x")
    [job] = wait_until(lambda: set_entries(r, "retry"), 30, message=f"a retry entry\n{worker.output()}")
    assert job["jid"] == jid and job["class"] == "tests.jobs.retry.AlwaysFails" and job["args"] == [7, "x"]
    assert job["error_class"] == "ValueError" and job["error_message"] == "always fails: (7, 'x')"
    assert job["retry_count"] == 0 and before <= job["failed_at"] <= time.time()
    assert job["queue"] == "default" and job["retry"] == 2 and job["tags"] == ["t"]
    assert "retried_at" not in job
    lines = json.loads(zlib.decompress(base64.b64decode(job["error_backtrace"])))
    assert lines[0].endswith("in `perform'") and len(lines) <= 5  # backtrace: 5, innermost first


def test_retry_in_one_second_runs_again_and_succeeds(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    jid = FailsOnce.perform_async()
    first = lambda: r.zrange("retry", 0, -1, withscores=True)  # noqa: E731
    [(member, score)] = wait_until(first, 30, message=f"the first failure\n{worker.output()}")
    failed_at = json.loads(member)["failed_at"]
    assert failed_at + 1 <= score <= failed_at + 1 + 9 + 1  # retry_in's 1 s plus Sidekiq's jitter of 0-9 s
    make_retries_due(r)  # the worker's poller runs it now, not after the jitter (up to 10 s in all)
    wait_until(lambda: jid in r.lrange(DONE, 0, -1), 30, message=f"the retry to succeed\n{worker.output()}")
    assert attempts(r, jid) == 2
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and deaths(r) == []


def test_retry_two_dies_after_three_attempts(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    jid = AlwaysFails.perform_async()

    def dead_or_hurry() -> bool:
        make_retries_due(r)
        return r.zcard("dead") > 0

    wait_until(dead_or_hurry, 30, interval=0.2, message=f"the job in dead\n{worker.output()}")
    [job] = set_entries(r, "dead")
    assert job["jid"] == jid and job["retry_count"] == 2 and job["error_class"] == "ValueError"
    assert job["retried_at"] >= job["failed_at"]
    assert attempts(r, jid) == 3 and r.zcard("retry") == 0
    wait_until(lambda: deaths(r), 10, message="the death hook")
    assert deaths(r) == [{"jid": jid, "error_class": "ValueError", "retry_count": 2, "exc": "ValueError"}]


def test_retry_false_no_retry_no_dead_but_death_hook(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    jid = AlwaysFails.set(retry=False).perform_async()
    wait_until(lambda: deaths(r), 30, message=f"the death hook\n{worker.output()}")
    assert deaths(r) == [{"jid": jid, "error_class": None, "retry_count": None, "exc": "ValueError"}]
    assert attempts(r, jid) == 1 and r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_dead_false_keeps_it_out_of_dead(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    jid = AlwaysFails.set(retry=0, dead=False).perform_async()
    wait_until(lambda: deaths(r), 30, message=f"the death hook\n{worker.output()}")
    assert deaths(r) == [{"jid": jid, "error_class": "ValueError", "retry_count": 0, "exc": "ValueError"}]
    assert attempts(r, jid) == 1 and r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_unknown_job_class_goes_to_retry_with_error_fields(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    worker = start(start_worker)
    jid = kiq.Client(e2e_config).push({"class": "NoSuchJob", "args": [1]})
    [job] = wait_until(lambda: set_entries(r, "retry"), 30, message=f"a retry entry\n{worker.output()}")
    assert job["jid"] == jid and job["class"] == "NoSuchJob" and job["retry_count"] == 0
    assert job["error_class"] == "kiq.errors.UnknownJobError" and "'NoSuchJob'" in job["error_message"]
