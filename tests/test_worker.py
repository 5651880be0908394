"""End to end: real ``kiq worker`` processes against a real Redis."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import kiq
import kiq.api
from kiq.embedded import EmbeddedRedis
from kiq.server.launcher import SECOND_STOP_AFTER
from tests.jobs.basic import AppendToFile, Record, Sleepy
from tests.support import FAST, InProcessWorker, WorkerProcess, identity_of, raw_redis, wait_until

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
    worker = start_worker("-r", "tests.jobs.basic", env={"KIQ_HEARTBEAT_INTERVAL": "0.2"})
    key = identity_of(r, worker)
    assert r.hget(key, "quiet") == "false"
    worker.signal(signal.SIGTSTP)
    wait_until(lambda: r.hget(key, "quiet") == "true", 30, message="quiet = true after TSTP")
    Record.perform_async("after-quiet")
    # two more heartbeats (0.4 s): the processors had time to fetch, had they been fetching (an idle processor
    # waits in BRPOP and takes a pushed job within milliseconds)
    for _ in range(2):
        beat = r.hget(key, "beat")
        wait_until(lambda beat=beat: r.hget(key, "beat") != beat, 30, message="another heartbeat")
    assert r.llen("queue:default") == 1 and not r.hexists("performed", "after-quiet")
    assert worker.stop() == 0
    assert not r.sismember("processes", key)


def test_a_second_term_requeues_the_running_job_and_exits_at_once(
    start_worker_process: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    jid = Sleepy.perform_async(60)
    worker = start_worker_process("-r", "tests.jobs.basic", "-t", "25", env=FAST)
    wait_until(lambda: r.llen("started") == 1, 30, message="the long job to start")
    worker.signal(signal.SIGTERM)
    worker.signal(signal.SIGTERM)  # the same stop delivered twice at once (Ctrl-C to a process group): one stop
    wait_until(lambda: "shutting down" in worker.output(), 10, message="the stop to begin")
    time.sleep(SECOND_STOP_AFTER + 0.2)
    assert worker.running and "stopping now" not in worker.output()
    started = time.monotonic()
    worker.signal(signal.SIGINT)  # an impatient operator's Ctrl-C
    assert worker.wait(10) == 0
    assert time.monotonic() - started < 10  # not the 25 s timeout
    (requeued,) = r.lrange("queue:default", 0, -1)
    assert json.loads(requeued)["jid"] == jid
    assert "stopping now: the running jobs are requeued" in worker.output()


def test_hup_stops_gracefully_and_lets_the_running_job_finish(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    """A closed terminal sends HUP: the worker must not die mid-job (Python's default for HUP)."""
    r = e2e_config.redis
    jid = Sleepy.perform_async(1)
    worker = start_worker("-r", "tests.jobs.basic", env=FAST)
    wait_until(lambda: r.llen("started") == 1, 30, message="the job to start")
    worker.signal(signal.SIGHUP)
    assert worker.wait(15) == 0
    assert r.lrange("finished", 0, -1) == [jid]
    assert r.llen("queue:default") == 0


def test_a_malformed_payload_goes_to_dead_and_the_next_job_runs(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    r.lpush("queue:default", '{"class": "Record", "args": [')
    Record.perform_async("good")
    worker = start_worker("-r", "tests.jobs.basic", env=FAST)
    # both come in one fetch and run on two threads: the good one may end before the bad one is buried
    wait_until(lambda: r.hexists("performed", "good") and r.zcard("dead"), 30, message="the good job and the dead one")
    assert r.zrange("dead", 0, -1) == ['{"class": "Record", "args": [']
    assert worker.stop() == 0
    assert "Invalid job payload, moved to the dead set" in worker.output()


@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_a_payload_that_is_not_utf8_goes_to_dead_as_stored_and_its_neighbours_run(
    start_worker: StartWorker, e2e_config: kiq.Config, fetch: str
) -> None:
    """One round trip fetches a batch (RPOP count, or the reliable script); decoding the batch whole would lose
    every job in it for the one bad payload."""
    r, raw = e2e_config.redis, raw_redis(e2e_config)
    bad = b'{"class":"Record","args":["\xff\xfe not utf-8"],"jid":"0123456789abcdef01234567","queue":"default"}'
    Record.perform_bulk([[f"before-{i}"] for i in range(22)])
    raw.lpush("queue:default", bad)
    Record.perform_bulk([[f"after-{i}"] for i in range(23)])
    worker = start_worker("-r", "tests.jobs.basic", "-c", "10", "--fetch", fetch, env=FAST)
    wait_until(lambda: r.hlen("performed") == 45, 30, message="the 45 good jobs")
    wait_until(lambda: r.zcard("dead") == 1, 10, message="the bad one in dead")
    assert raw.zrange("dead", 0, -1) == [bad]  # byte for byte as it was stored
    assert r.llen("queue:default") == 0
    entry = next(iter(kiq.api.DeadSet(e2e_config)))
    assert not entry.parsed and entry.raw == bad
    assert worker.stop() == 0
    assert "the payload is not valid UTF-8" in worker.output()
    assert "unreachable" not in worker.output()
    assert not list(r.scan_iter("kiq:working:*"))


def test_the_worker_recovers_when_redis_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.ensure_running()
    config = kiq.Config(redis_url=url)
    client = kiq.Client(config)
    try:
        with InProcessWorker(["-r", "tests.jobs.basic", "-c", "2"], url, FAST) as worker:
            client.push({"class": "Record", "args": ["before"]})
            wait_until(lambda: config.redis.hexists("performed", "before"), 30, message="a job before the restart")
            server.stop()
            wait_until(lambda: "is unreachable" in worker.output(), 30, message="the worker to log the outage")
            server.ensure_running()
            config.redis.connection_pool.disconnect()
            client.push({"class": "Record", "args": ["after"]})
            wait_until(lambda: config.redis.hexists("performed", "after"), 30, message="a job after the restart")
            wait_until(lambda: "Redis works again" in worker.output(), 30, message="the worker to log the recovery")
            assert worker.stop() == 0
            assert worker.output().count("is unreachable") == 1, worker.output()
    finally:
        config.redis.close()
        server.stop()


@pytest.mark.own_redis
@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_a_worker_drains_the_queue_while_redis_is_at_maxmemory(
    start_worker: StartWorker, e2e_config: kiq.Config, tmp_path: Path, fetch: str
) -> None:
    """With noeviction, Redis refuses every command that needs memory; draining the queue is how an operator gets
    out of that state, so fetching (which frees as much as it takes) must keep working."""
    r = e2e_config.redis
    done = tmp_path / "done.txt"
    jids = set(AppendToFile.perform_bulk([[str(done)]] * 3000))
    previous = r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)  # always over the limit
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            r.lpush("queue:other", "x")
        worker = start_worker("-r", "tests.jobs.basic", "-c", "10", "--fetch", fetch, env=FAST)
        wait_until(lambda: done.exists() and len(done.read_text().split()) >= 3000, 60, message="3,000 jobs")
        assert r.llen("queue:default") == 0
    finally:
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", previous)
    assert set(done.read_text().split()) == jids
    assert worker.stop() == 0
    output = worker.output()
    assert "is out of memory" in output and "unreachable" not in output
    assert not list(r.scan_iter("kiq:working:*"))
