"""Keyword arguments as ``kiq.api`` reads them, on a real Redis: ``kwargs`` and ``arguments_line`` of a job in a queue,
in the scheduled, retry and dead sets and running on a worker thread; a job without any, or whose ``kwargs`` field
(written by another producer) is not an object, reads as ``{}`` and never raises."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
from kiq.api import DeadSet, Queue, RetrySet, ScheduledSet, Workers, display_arguments
from kiq.payload import dumps
from tests.support import WorkerProcess, wait_until


class Charge(kiq.Job):
    kiq_name = "ApiCharge"

    def perform(self, account: int, *, amount: int = 0, note: str = "") -> None: ...


def payload(jid: str, **extra: Any) -> dict[str, Any]:
    return {"class": "ApiCharge", "args": [7], "jid": jid, "queue": "default", "retry": True, **extra}


def test_a_queued_job_reads_its_kwargs_and_shows_them_after_its_args(config: kiq.Config) -> None:
    with_kwargs = Charge.perform_async(7, amount=5, note="café")
    without = Charge.perform_async(8)
    records = {record.jid: record for record in Queue("default", config)}
    assert records[with_kwargs].kwargs == {"amount": 5, "note": "café"}
    assert records[with_kwargs].arguments_line == '[7] {"amount": 5, "note": "café"}'
    assert records[without].kwargs == {}
    assert records[without].arguments_line == "[8]"  # what it always was
    assert "kwargs" not in records[without].item


@pytest.mark.parametrize("field", ["amount=5", ["amount", 5], 5, None])
def test_a_kwargs_field_that_is_not_an_object_reads_as_none_and_stays_in_the_payload(
    config: kiq.Config, r: redis.Redis, field: object
) -> None:
    r.lpush("queue:default", dumps(payload("odd", kwargs=field)))
    (record,) = Queue("default", config)
    assert record.kwargs == {} and record.args == [7] and record.arguments_line == "[7]"
    assert record.item["kwargs"] == field  # the payload as written, for whoever looks at it whole
    assert record.as_dict()["kwargs"] == field


def test_scheduled_retry_and_dead_entries_read_their_kwargs(config: kiq.Config, r: redis.Redis) -> None:
    scheduled = Charge.perform_in(3600, 7, amount=1)
    failure = {"error_class": "ValueError", "error_message": "no", "failed_at": time.time(), "retry_count": 1}
    RetrySet(config).schedule(time.time() + 60, payload("retry", kwargs={"amount": 2}, **failure))
    DeadSet(config).kill(dumps(payload("dead", kwargs={"amount": 3}, **failure)), notify_failure=False)
    entry = ScheduledSet(config).find_job(scheduled or "")
    assert entry is not None and entry.kwargs == {"amount": 1}
    retry, dead = RetrySet(config).find_job("retry"), DeadSet(config).find_job("dead")
    assert retry is not None and retry.kwargs == {"amount": 2} and retry.arguments_line == '[7] {"amount": 2}'
    assert dead is not None and dead.kwargs == {"amount": 3}
    # retrying keeps them: the job goes back to its queue with its kwargs
    assert retry.retry()
    (requeued,) = Queue("default", config)
    assert requeued.jid == "retry" and requeued.kwargs == {"amount": 2}


def test_display_arguments_says_what_json_cannot_as_its_repr() -> None:
    assert display_arguments([], {}) == "[]"
    assert display_arguments(["<b>"], {"when": {1, 2}}) == '["<b>"] {"when": "{1, 2}"}'


def test_a_running_job_shows_its_kwargs_in_workers(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    from tests.jobs.web import Nap  # sleeps in short steps: it stays on its thread while the test looks

    start_worker("-r", "tests.jobs.web", "-c", "2", env={"KIQ_HEARTBEAT_INTERVAL": "0.5"})
    jid = Nap.perform_async(seconds=30)
    wait_until(lambda: any(work.payload.get("jid") == jid for work in Workers(e2e_config)), 30, message="the nap")
    (work,) = [work for work in Workers(e2e_config) if work.payload.get("jid") == jid]
    assert (work.args, work.kwargs, work.arguments_line) == ([], {"seconds": 30}, '[] {"seconds": 30}')


def test_a_running_job_whose_kwargs_is_not_an_object_reads_as_none(config: kiq.Config, r: redis.Redis) -> None:
    r.sadd("processes", "host:1:odd")
    r.hset("host:1:odd", mapping={"busy": 1, "beat": time.time(), "info": json.dumps({"hostname": "host"})})
    work = {"queue": "default", "payload": dumps(payload("running", kwargs=[1])), "run_at": time.time()}
    r.hset("host:1:odd:work", mapping={"t1": json.dumps(work)})
    (running,) = Workers(config)
    assert (running.args, running.kwargs, running.arguments_line) == ([7], {}, "[7]")
