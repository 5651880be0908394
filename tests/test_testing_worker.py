"""kiq.testing.Worker: a real worker in the test's process (its use through start_worker: the end-to-end tests)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import kiq
import kiq.ext
import kiq.testing
from kiq.keys import keyspace
from tests.jobs.basic import Record
from tests.support import wait_until


def test_join_waits_for_the_queues_and_what_is_due_and_each_worker_keeps_its_own_lines(config: kiq.Config) -> None:
    r = config.redis
    keys = keyspace(r)
    Record.set(queue="a").perform_bulk([[f"a-{i}"] for i in range(50)])
    due = kiq.ext.dumps({"class": "Record", "args": ["due"], "queue": "a", "jid": "d" * 24, "created_at": time.time()})
    r.zadd(keys.key("schedule"), {due: time.time() - 1})  # due: the poller moves it, join waits for it
    later = kiq.ext.dumps({"class": "Record", "args": ["later"], "queue": "a", "jid": "e" * 24})
    r.zadd(keys.key("schedule"), {later: time.time() + 3600})  # not due: join does not wait for it
    with (
        kiq.testing.Worker(config, queues=["a"], concurrency=3) as first,
        kiq.testing.Worker(config, queues=["b"]) as second,
    ):
        first.join(timeout=30)
        assert r.hlen("performed") == 51 and r.hget("performed", "due") == "1"
        assert first.identity != second.identity
        # registered by its first heartbeat, which a loaded machine may run after the jobs
        wait_until(lambda: r.sismember(keys.key("processes"), first.identity), 10)
        Record.set(queue="b").perform_async("b-0")
        second.join(timeout=30)
        assert r.hget("performed", "b-0") == "1"
    assert first.exit_code == 0 and second.exit_code == 0
    assert f"identity={first.identity}" in first.output() and f"identity={second.identity}" not in first.output()
    assert "jid=" in first.output() and "bye" in second.output()
    assert not r.smembers(keys.key("processes"))  # both deregistered on their way out


def test_a_quiet_worker_fetches_nothing_and_wait_until_gives_up_in_time(config: kiq.Config) -> None:
    with kiq.testing.Worker(config, queues=["default"], heartbeat_interval=0.5) as worker:
        worker.quiet()
        worker.wait_until(lambda: config.redis.hget(keyspace(config.redis).key(worker.identity), "quiet") == "true", 10)
        Record.perform_async("after-quiet")
        with pytest.raises(TimeoutError):
            worker.wait_until(lambda: config.redis.hget("performed", "after-quiet"), 0.5)
        assert worker.stop() == 0
    assert config.redis.llen("queue:default") == 1


class SeesItsConfig(kiq.Job):
    """Records what ``config=None`` means inside the job: the concurrency of ``kiq.default_config()``."""

    kiq_options = {"queue": "sees"}

    def perform(self, name: str) -> None:
        kiq.default_config().redis.hset("seen", name, kiq.default_config().concurrency)


class SeesItsConfigAsync(kiq.Job):
    kiq_options = {"queue": "sees"}

    async def perform(self, name: str) -> None:
        kiq.default_config().redis.hset("seen", name, kiq.default_config().concurrency)


class Walks(kiq.IterableJob):
    """An iterable job of 0.6 s: a worker's max_iteration_runtime of 0.2 s interrupts and resumes it."""

    kiq_options = {"queue": "sees"}

    def build_enumerator(self, count: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return ((index, index) for index in range(cursor or 0, count))

    def each_iteration(self, item: int, count: int) -> None:
        time.sleep(0.01)

    def on_resume(self) -> None:
        kiq.default_config().redis.incr("resumed")


def test_inside_its_jobs_the_default_config_is_the_workers_own(config: kiq.Config) -> None:
    """A job run by kiq.testing.Worker, sync or async, sees that worker's config as the default, as a job in a worker
    process does: an iterable job its runtime limit, a push its Redis (here: the worker's concurrency, 3, not the
    test's)."""
    assert kiq.default_config() is config and config.concurrency != 3
    SeesItsConfig.perform_async("sync")
    SeesItsConfigAsync.perform_async("async")
    Walks.perform_async(60)
    with kiq.testing.Worker(config, queues=["sees"], concurrency=3, max_iteration_runtime=0.2) as worker:
        worker.join(timeout=30)
    assert config.redis.hgetall("seen") == {"sync": "3", "async": "3"}
    assert int(config.redis.get("resumed") or 0) >= 2  # 0.6 s of items in runs of 0.2 s
    assert kiq.default_config() is config  # outside the jobs, the test's own
