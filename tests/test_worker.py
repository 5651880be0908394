"""End to end: real ``kiq worker`` processes against a real Redis."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import kiq
from kiq.redis import EmbeddedRedis
from tests.jobs.basic import Record, Sleepy
from tests.support import FAST, WorkerProcess, identity_of, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]


def test_a_thousand_jobs_are_each_performed_exactly_once(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Record.perform_bulk([[f"job-{i}"] for i in range(1000)])
    worker = start_worker("-r", "tests.jobs.basic", "-c", "5", env=FAST)
    wait_until(lambda: r.hlen("performed") == 1000, 60, message="1,000 jobs performed")
    assert worker.stop() == 0
    performed = r.hgetall("performed")
    assert set(performed) == {f"job-{i}" for i in range(1000)} and set(performed.values()) == {"1"}
    assert r.llen("order") == 1000 and r.llen("queue:default") == 0
    assert r.get("stat:processed") == "1000" and r.get("stat:failed") == "0"


def test_strict_order(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Record.set(queue="low").perform_bulk([[f"low-{i}"] for i in range(20)])
    Record.set(queue="high").perform_bulk([[f"high-{i}"] for i in range(20)])
    worker = start_worker("-r", "tests.jobs.basic", "-q", "high", "-q", "low", "-c", "1", env=FAST)
    wait_until(lambda: r.llen("order") == 40, 30, message="40 jobs performed")
    assert worker.stop() == 0
    order = r.lrange("order", 0, -1)
    assert order == [f"high-{i}" for i in range(20)] + [f"low-{i}" for i in range(20)]  # FIFO within a queue


def test_weighted_order(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Record.set(queue="low").perform_bulk([[f"low-{i}"] for i in range(150)])
    Record.set(queue="high").perform_bulk([[f"high-{i}"] for i in range(150)])
    worker = start_worker("-r", "tests.jobs.basic", "-q", "high,3", "-q", "low,1", "-c", "1", env=FAST)
    wait_until(lambda: r.llen("order") >= 100, 30, message="100 jobs performed")
    assert worker.stop() == 0
    first = r.lrange("order", 0, 99)
    high = sum(key.startswith("high") for key in first)
    assert 55 <= high <= 92, f"{high} of the first 100 jobs came from the queue of weight 3 (75 expected)"


def test_tstp_quiets_the_worker(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    worker = start_worker("-r", "tests.jobs.basic", env=FAST)
    key = identity_of(r, worker)
    assert r.hget(key, "quiet") == "false"
    worker.signal(signal.SIGTSTP)
    wait_until(lambda: r.hget(key, "quiet") == "true", 30, message="quiet = true after TSTP")
    Record.perform_async("after-quiet")
    for _ in range(2):  # two more heartbeats: the processors had time to fetch, had they been fetching
        beat = r.hget(key, "beat")
        wait_until(lambda beat=beat: r.hget(key, "beat") != beat, 30, message="another heartbeat")
    assert r.llen("queue:default") == 1 and not r.hexists("performed", "after-quiet")
    assert worker.stop() == 0
    assert not r.sismember("processes", key)


def test_term_during_a_long_job_requeues_it_and_exits_in_time(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    jid = Sleepy.perform_async(60)
    worker = start_worker("-r", "tests.jobs.basic", "-t", "1", env=FAST)
    wait_until(lambda: r.llen("started") == 1, 30, message="the long job to start")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(1 + 5) == 0
    assert time.monotonic() - started < 1 + 5
    (requeued,) = r.lrange("queue:default", 0, -1)
    assert json.loads(requeued)["jid"] == jid
    assert r.llen("finished") == 0 and r.zcard("retry") == 0
    assert "pushed 1 jobs back to Redis" in worker.output()


def test_a_malformed_payload_goes_to_dead_and_the_next_job_runs(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    r.lpush("queue:default", '{"class": "Record", "args": [')
    Record.perform_async("good")
    worker = start_worker("-r", "tests.jobs.basic", env=FAST)
    wait_until(lambda: r.hexists("performed", "good"), 30, message="the good job to run")
    assert r.zrange("dead", 0, -1) == ['{"class": "Record", "args": [']
    assert worker.stop() == 0
    assert "Invalid JSON for job" in worker.output()


def test_the_worker_recovers_when_redis_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.ensure_running()
    config = kiq.Config(redis_url=url)
    client = kiq.Client(config)
    try:
        with WorkerProcess(["-r", "tests.jobs.basic", "-c", "2"], url, tmp_path / "worker.log", FAST) as worker:
            client.push({"class": "Record", "args": ["before"]})
            wait_until(lambda: config.redis.hexists("performed", "before"), 30, message="a job before the restart")
            server.stop()
            wait_until(lambda: "is unreachable" in worker.output(), 30, message="the worker to log the outage")
            server.ensure_running()
            config.redis.connection_pool.disconnect()
            client.push({"class": "Record", "args": ["after"]})
            wait_until(lambda: config.redis.hexists("performed", "after"), 30, message="a job after the restart")
            wait_until(lambda: "reachable again" in worker.output(), 30, message="the worker to log the recovery")
            assert worker.stop() == 0
            assert worker.output().count("is unreachable") == 1, worker.output()
    finally:
        config.redis.close()
        server.stop()
