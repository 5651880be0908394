"""Unique jobs in a real worker: the lock goes when the job succeeded (with ``unique_until: "start"``, when it
started), stays while a failed job waits for its retry, goes when the job dies, and expires by its TTL when the worker
running the job is killed with SIGKILL."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import kiq
from kiq.plugins.unique import lock_holder, lock_key
from tests.jobs.unique import FAIL, HOLD, LOCKED_AT_START, RUNS, Dies, FailsWhileFlagged, Held, Once, StartsUnlocked
from tests.support import FAST, WorkerProcess, identity_of, make_retries_due, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-r", "tests.jobs.unique", "-c", "2")
ENV = {**FAST, "KIQ_PLUGINS": "unique", "KIQ_POLL_INTERVAL": "0.2"}


@pytest.fixture
def config(e2e_config: kiq.Config) -> kiq.Config:
    e2e_config.add_plugin("unique")
    return e2e_config


def test_the_lock_is_gone_once_the_job_succeeded(config: kiq.Config, start_worker: StartWorker) -> None:
    jid = Once.perform_async(1)
    assert lock_holder(Once, [1]) == jid
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: config.redis.lrange(RUNS, 0, -1) == [jid], message="the job to run")
    wait_until(lambda: lock_holder(Once, [1]) is None, message="the lock to be released")
    assert Once.perform_async(1) is not None


def test_the_lock_stays_while_the_job_waits_for_its_retry(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    r.set(FAIL, 1)
    jid = FailsWhileFlagged.perform_async(1)
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: r.zcard("retry") == 1, message="the failed job in the retry set")
    assert lock_holder(FailsWhileFlagged, [1]) == jid
    assert FailsWhileFlagged.perform_async(1) is None  # a duplicate pushed while the job waits for its retry
    r.delete(FAIL)
    make_retries_due(r)  # the worker's poller pushes the retry again: it passes the lock it holds
    wait_until(lambda: r.lrange(RUNS, 0, -1) == [jid, jid], message="the retry to run")
    wait_until(lambda: lock_holder(FailsWhileFlagged, [1]) is None, message="the lock to be released")


def test_unique_until_start_releases_the_lock_when_the_job_starts(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    assert StartsUnlocked.perform_async(1) is not None
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: config.redis.lrange(LOCKED_AT_START, 0, -1) == ["0"], message="the job to run")
    assert lock_holder(StartsUnlocked, [1]) is None


def test_a_job_that_dies_releases_its_lock(config: kiq.Config, start_worker: StartWorker) -> None:
    jid = Dies.perform_async(1)
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: config.redis.zcard("dead") == 1, message="the job in the dead set")
    wait_until(lambda: lock_holder(Dies, [1]) is None, message="the death hook to release the lock")
    assert Dies.perform_async(1) not in (None, jid)


def test_the_lock_of_a_job_whose_worker_was_killed_expires_by_its_ttl(
    config: kiq.Config, start_worker_process: StartWorker
) -> None:
    r = config.redis
    r.set(HOLD, 1)
    worker = start_worker_process(*WORKER, env=ENV)
    identity_of(r, worker)  # up before the push: the lock's 2 s start at the push, and a start can take longer
    jid = Held.perform_async()  # unique_for: 2 s
    wait_until(lambda: r.lrange(RUNS, 0, -1) == [jid], message="the job to start")
    worker.kill()  # SIGKILL: nothing releases the lock
    assert lock_holder(Held, []) == jid and Held.perform_async() is None
    assert 0 < r.pttl(lock_key("UniqueHeld", "default", [])) <= 2000
    wait_until(lambda: lock_holder(Held, []) is None, 5, message="the lock's TTL to end it")
    assert Held.perform_async() is not None
