"""kiq.testing.Worker: a real worker in the test's process (its use through start_worker: the end-to-end tests)."""

from __future__ import annotations

import time

import pytest

import kiq
import kiq.ext
import kiq.testing
from kiq.keys import keyspace
from tests.jobs.basic import Record


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
        assert first.identity != second.identity and first.identity in r.smembers(keys.key("processes"))
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
