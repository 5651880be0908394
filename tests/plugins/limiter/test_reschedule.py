"""Over the limit, a job is rescheduled, not failed: the limiter plugin's middleware writes the same payload (same
jid, same retry fields) into ``schedule`` with a growing backoff, and the job counts as processed, not failed; past
``limiter_max_reschedules`` the OverLimit is an ordinary error. In-process through the server chain, then in a real
worker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins.limiter import OverLimit, concurrent
from tests.jobs.limiter import RUNS, Blocked
from tests.support import FAST, WorkerProcess, wait_until

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def limited(config: kiq.Config) -> kiq.Config:
    """The test's config with the limiter plugin, and a backoff of 10 s."""
    config.add_plugin("limiter")
    config.limiter_backoff = 10
    return config


def perform_through_the_chain(config: kiq.Config, job: dict[str, Any]) -> None:
    """What the processor does around ``perform``: the server chain, then the job."""
    instance = Blocked()
    instance.jid, instance.job = job["jid"], job
    config.server_middleware.invoke((instance, job, "default"), instance.perform)


def blocked_job(**fields: Any) -> dict[str, Any]:
    return {"class": "LimiterBlocked", "args": [], "jid": kiq.ext.new_jid(), "queue": "default", "retry": 5,
            "created_at": time.time() - 60, "enqueued_at": time.time(), **fields}  # fmt: skip


def test_an_over_limit_job_is_rescheduled_with_its_jid_and_retry_fields(limited: kiq.Config, r: redis.Redis) -> None:
    job = blocked_job(retry_count=2, error_message="an earlier failure")
    with concurrent("blocked", 1):  # the only slot is taken
        perform_through_the_chain(limited, job)  # no exception: handled
    ((payload, at),) = r.zrange("schedule", 0, -1, withscores=True)
    rescheduled = json.loads(payload)
    assert rescheduled == {**{k: v for k, v in job.items() if k != "enqueued_at"}, "overrated": 1}
    assert time.time() + 10 - 1 < at < time.time() + 20  # backoff * 1, plus up to one more backoff
    assert r.zcard("retry") == 0 and r.hgetall("kiq:limiter:overrated") == {"concurrent:blocked": "1"}


def test_the_backoff_grows_with_each_reschedule(limited: kiq.Config, r: redis.Redis) -> None:
    with concurrent("blocked", 1):
        perform_through_the_chain(limited, blocked_job(overrated=3))
    ((payload, at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(payload)["overrated"] == 4
    assert time.time() + 40 - 1 < at < time.time() + 50


def test_an_unusable_reschedule_count_starts_over(limited: kiq.Config, r: redis.Redis) -> None:
    with concurrent("blocked", 1):
        perform_through_the_chain(limited, blocked_job(overrated="many"))
    assert json.loads(r.zrange("schedule", 0, -1)[0])["overrated"] == 1


def test_past_the_most_reschedules_over_limit_is_an_error_like_any_other(limited: kiq.Config, r: redis.Redis) -> None:
    limited.limiter_max_reschedules = 2
    with concurrent("blocked", 1), pytest.raises(OverLimit):
        perform_through_the_chain(limited, blocked_job(overrated=2))
    assert r.zcard("schedule") == 0


def test_without_the_plugin_over_limit_is_an_error(config: kiq.Config) -> None:
    with concurrent("blocked", 1), pytest.raises(OverLimit):
        perform_through_the_chain(config, blocked_job())


def test_in_a_worker_an_over_limit_job_is_acknowledged_rescheduled_and_not_failed(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    e2e_config.add_plugin("limiter")
    holder = concurrent("blocked", 1, config=e2e_config).acquire()  # this test holds the only slot
    jid = Blocked.perform_async()
    env = {**FAST, "KIQ_PLUGINS": "limiter", "KIQ_LIMITER_BACKOFF": "30", "KIQ_POLL_INTERVAL": "0.2"}
    worker = start_worker("-r", "tests.jobs.limiter", "-c", "2", env=env)
    wait_until(lambda: r.zcard("schedule") == 1, message="the job to be rescheduled")
    ((payload, at),) = r.zrange("schedule", 0, -1, withscores=True)
    rescheduled = json.loads(payload)
    assert rescheduled["jid"] == jid and rescheduled["overrated"] == 1 and "retry_count" not in rescheduled
    assert 30 - 1 < at - time.time() < 60
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and not r.exists("queue:default")
    holder.release()
    r.zadd("schedule", {payload: time.time()}, xx=True)  # due now: the worker's poller enqueues it again
    wait_until(lambda: r.lrange(RUNS, 0, -1) == [jid], message="the job to run once the slot is free")
    assert worker.stop() == 0
    assert (r.get("stat:processed"), r.get("stat:failed")) == ("2", "0")
    assert "rescheduled in" in worker.output()
