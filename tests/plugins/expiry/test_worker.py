"""Expiring jobs in a real worker: a job past its deadline never runs; it is acknowledged, counted and announced with
``kiq_job_dropped``, with no retry, no dead set and no death hook; a unique lock it held is released."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import kiq
from kiq.plugins.expiry import expired_counts
from kiq.plugins.unique import lock_holder
from tests.jobs.expiry import DEATHS, DROPPED, RUNS, Quote, UniqueQuote
from tests.support import FAST, WorkerProcess, wait_until

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-r", "tests.jobs.expiry", "-c", "1")  # one thread: the queue runs in order
ENV = {**FAST, "KIQ_PLUGINS": "expiry,unique,tests.jobs.expiry:Recorder"}


@pytest.fixture
def config(e2e_config: kiq.Config) -> kiq.Config:
    e2e_config.add_plugin("expiry")
    e2e_config.add_plugin("unique")
    return e2e_config


def wait_past(deadline: float) -> None:
    wait_until(lambda: time.time() > deadline, 5, message="the deadline to pass")


def test_a_job_past_its_deadline_never_runs(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    stale = Quote.set(expires_in=0.2).perform_async(1)
    fresh = Quote.perform_async(2)  # pushed after it, so it runs after it: when it ran, the stale one was handled
    wait_past(json.loads(r.lindex("queue:default", -1))["expires_at"])
    worker = start_worker(*WORKER, env=ENV)
    wait_until(lambda: r.lrange(RUNS, 0, -1) == [fresh], message="the fresh job to run")
    assert expired_counts(config) == {"ExpiryQuote": 1}
    (dropped,) = [json.loads(entry) for entry in r.lrange(DROPPED, 0, -1)]
    assert dropped["jid"] == stale and dropped["reason"].startswith("expired: its deadline passed")
    assert r.llen(DEATHS) == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert not r.exists("queue:default")
    assert worker.stop() == 0
    assert f"{stale} expired" in worker.output()


def test_an_expired_job_releases_its_unique_lock(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    stale = UniqueQuote.set(expires_in=0.2).perform_async(1)
    assert lock_holder(UniqueQuote, [1]) == stale
    wait_past(json.loads(r.lindex("queue:default", 0))["expires_at"])
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: expired_counts(config) == {"ExpiryUniqueQuote": 1}, message="the job to be dropped")
    wait_until(lambda: lock_holder(UniqueQuote, [1]) is None, message="the lock to be released")
    assert r.llen(RUNS) == 0
