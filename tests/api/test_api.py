"""kiq.api on a real Redis: dead set trimming and death hooks, queues, the three sorted sets, processes, stats."""

from __future__ import annotations

import base64
import datetime
import json
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.api import DeadSet, JobRecord, ProcessSet, Queue, RetrySet, ScheduledSet, Stats, Workers
from kiq.errors import KiqError
from kiq.middleware import ClientMiddleware, Wrapper
from kiq.payload import dumps
from tests.jobs.api import RUNS_KEY, RecordRun
from tests.support import WorkerProcess, wait_until


class Hard(kiq.Job):
    kiq_name = "ApiHardJob"

    def perform(self, *args: Any) -> None: ...


class DeathRecorder:
    def __init__(self) -> None:
        self.deaths: list[tuple[dict[str, Any], BaseException | None]] = []
        self.errors: list[dict[str, Any]] = []

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        self.deaths.append((job, exc))

    @kiq.hookimpl
    def kiq_error(self, exc: BaseException, context: dict[str, Any], config: kiq.Config) -> None:
        self.errors.append(context)


@pytest.fixture
def recorder(config: kiq.Config) -> DeathRecorder:
    recorder = DeathRecorder()
    config.plugins.register(recorder)
    return recorder


def job_json(jid: str, **extra: Any) -> str:
    return dumps({"class": "ApiHardJob", "args": [jid], "jid": jid, "queue": "default", "retry": True, **extra})


def failed_json(jid: str, **extra: Any) -> str:
    fields = {"error_class": "ValueError", "error_message": "boom", "failed_at": time.time() - 60, "retry_count": 2}
    return job_json(jid, **{**fields, **extra})


def jids(entries: Any) -> list[str | None]:
    return [entry.jid for entry in entries]


# -- DeadSet.kill: Sidekiq's trimming and the death hook ------------------------------------------------
@pytest.mark.cluster
def test_dead_set_never_exceeds_dead_max_jobs(config: kiq.Config, r: redis.Redis) -> None:
    config.dead_max_jobs = 3
    dead = DeadSet(config)
    for index in range(6):
        dead.kill(job_json(f"j{index}"), notify_failure=False)
        assert dead.size <= 3
    assert jids(dead) == ["j5", "j4", "j3"]  # the newest stay, newest first


@pytest.mark.cluster
def test_dead_max_jobs_zero_keeps_nothing(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    config.dead_max_jobs = 0
    DeadSet(config).kill(job_json("j"), notify_failure=False)
    assert r.zcard(keys.key("dead")) == 0


@pytest.mark.cluster
def test_dead_entries_older_than_dead_timeout_are_trimmed(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    config.dead_timeout = 3600
    now = time.time()
    r.zadd(keys.key("dead"), {job_json("ancient"): now - 7200, job_json("recent"): now - 60})
    DeadSet(config).kill(job_json("new"), notify_failure=False)
    assert sorted(json.loads(m)["jid"] for m in r.zrange(keys.key("dead"), 0, -1)) == ["new", "recent"]
    assert abs(r.zscore(keys.key("dead"), job_json("new")) - now) < 5  # type: ignore[operator]


@pytest.mark.cluster
def test_kill_runs_the_death_hook(config: kiq.Config, recorder: DeathRecorder) -> None:
    error = ValueError("gone")
    DeadSet(config).kill(job_json("a"), exc=error)
    DeadSet(config).kill(job_json("b"), notify_failure=False)
    assert [(job["jid"], exc) for job, exc in recorder.deaths] == [("a", error)]


def test_a_failing_death_hook_is_reported_not_raised(config: kiq.Config, recorder: DeathRecorder) -> None:
    class Broken:
        @kiq.hookimpl
        def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
            raise RuntimeError("hook broke")

    config.plugins.register(Broken())
    DeadSet(config).kill(job_json("a"))
    assert DeadSet(config).size == 1
    assert [context["context"] for context in recorder.errors] == ["plugin 'Broken' failed in kiq_death"]
    assert len(recorder.deaths) == 1  # the other hooks still ran


# -- Queue and JobRecord ----------------------------------------------------------------------------
@pytest.mark.cluster
def test_queue_size_iteration_find_delete_clear(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    pushed = [Hard.perform_async(index) for index in range(120)]
    Hard.set(queue="low").perform_async("x")
    queue = Queue("default", config)
    assert queue.size == len(queue) == 120
    assert [record.jid for record in queue] == pushed[::-1]  # newest first
    assert [q.name for q in Queue.all(config)] == ["default", "low"]

    record = queue.find_job(pushed[7])
    assert record is not None and record.args == [7] and record.klass == "ApiHardJob" and record.queue == "default"
    assert record.delete() and not record.delete()
    assert queue.find_job(pushed[7]) is None and queue.size == 119

    for record in queue:  # deleting while iterating skips nothing
        assert record.delete()
    assert queue.size == 0

    assert Queue("low", config).clear() == 1
    assert r.smembers(keys.key("queues")) == {"default"}


@pytest.mark.cluster
def test_queue_latency(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    queue = Queue("default", config)
    assert queue.latency == 0.0
    r.lpush(keys.queue("default"), job_json("old", enqueued_at=time.time() - 30))
    r.lpush(keys.queue("default"), job_json("new", enqueued_at=time.time()))
    assert 29 < queue.latency < 40
    assert 29 < Stats(config).default_queue_latency < 40
    r.delete(keys.queue("default"))
    r.lpush(keys.queue("default"), job_json("sidekiq8", enqueued_at=int((time.time() - 10) * 1000)))  # milliseconds
    assert 9 < queue.latency < 20


@pytest.mark.cluster
def test_job_record_fields(config: kiq.Config) -> None:
    backtrace = base64.b64encode(zlib.compress(json.dumps(["a.py:1", "b.py:2"]).encode())).decode()
    raw = failed_json("abc", created_at=100.0, enqueued_at=200.0, error_backtrace=backtrace, tags=["t"], extra=1)
    record = JobRecord(raw, config=config)
    assert (record.klass, record.args, record.jid, record.queue) == ("ApiHardJob", ["abc"], "abc", "default")
    assert (record.created_at, record.enqueued_at, record.retry_count) == (100.0, 200.0, 2)
    assert (record.error_class, record.error_message, record.tags) == ("ValueError", "boom", ["t"])
    assert record.error_backtrace == ["a.py:1", "b.py:2"]
    assert record["extra"] == 1 and record.value == raw
    broken = JobRecord("{oops", "q", config)
    assert not broken.parsed and broken.klass == "unknown" and broken.as_dict() == {"queue": "q", "raw": "{oops"}


# -- the sorted sets -----------------------------------------------------------------------------------
class Stamp(ClientMiddleware):
    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
        job["stamped"] = True
        yield


@pytest.mark.cluster
def test_scheduled_set_listing_find_and_actions(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    config.client_middleware.add(Stamp)
    soon, later, latest = (Hard.perform_in(delay, delay) for delay in (60, 120, 180))
    scheduled = ScheduledSet(config)
    assert scheduled.size == 3
    assert jids(scheduled) == [latest, later, soon]  # newest (furthest) first
    entry = scheduled.find_job(later)  # type: ignore[arg-type]
    assert entry is not None and entry.args == [120] and abs(entry.at - time.time() - 120) < 5
    assert jids(scheduled.fetch(entry.score)) == [later]
    assert scheduled.fetch(entry.score, "nope") == []
    assert scheduled.find_job("0" * 24) is None

    assert entry.add_to_queue() and not entry.add_to_queue()  # the second caller finds it gone
    (job,) = [json.loads(raw) for raw in r.lrange(keys.queue("default"), 0, -1)]
    assert job["jid"] == later and job["stamped"] is True and "enqueued_at" in job

    assert scheduled.delete_by_jid(soon) and not scheduled.delete_by_jid(soon)  # type: ignore[arg-type]
    entry = scheduled.find_job(latest)  # type: ignore[arg-type]
    assert entry is not None and entry.reschedule(time.time() + 5)
    assert abs(r.zscore(keys.key("schedule"), entry.value) - time.time() - 5) < 2  # type: ignore[operator]
    assert scheduled.clear() == 1 and scheduled.size == 0


@pytest.mark.cluster
def test_retry_set_retry_kill_and_bulk(
    config: kiq.Config, r: redis.Redis, recorder: DeathRecorder, keys: kiq.ext.Keyspace
) -> None:
    retries = RetrySet(config)
    now = time.time()
    for index in range(5):
        retries.schedule(now + index, json.loads(failed_json(f"r{index}")))
    entry = retries.find_job("r0")
    assert entry is not None and entry.error and entry.error_class == "ValueError" and entry.retry_count == 2

    assert entry.retry() and not entry.retry()
    (job,) = [json.loads(raw) for raw in r.lrange(keys.queue("default"), 0, -1)]
    assert job["jid"] == "r0" and job["retry_count"] == 1  # the next failure counts it up again

    assert retries.retry_by_jid("r1") and not retries.retry_by_jid("r1")
    killed = retries.find_job("r2")
    assert killed is not None and killed.kill()
    assert jids(DeadSet(config)) == ["r2"]
    assert [job["jid"] for job, _ in recorder.deaths] == ["r2"]

    assert retries.kill_all() == 2
    assert retries.size == 0 and DeadSet(config).size == 3
    assert DeadSet(config).retry_all() == 3
    assert DeadSet(config).size == 0 and r.llen(keys.queue("default")) == 5


@pytest.mark.cluster
def test_retry_all_leaves_unparseable_entries_and_refuses_to_retry_them(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    r.zadd(keys.key("retry"), {"{broken": 1.0, failed_json("ok"): 2.0})
    assert RetrySet(config).retry_all() == 1
    assert r.zrange(keys.key("retry"), 0, -1) == ["{broken"]
    (entry,) = list(RetrySet(config))
    with pytest.raises(KiqError, match="only be deleted"):
        entry.retry()
    assert entry.delete() and RetrySet(config).size == 0


@pytest.mark.cluster
def test_iterating_a_large_set_while_deleting_visits_every_entry(config: kiq.Config) -> None:
    dead = DeadSet(config)
    for index in range(130):
        dead.schedule(1000.0 + index, json.loads(job_json(f"d{index}")))
    seen = []
    for entry in dead:
        seen.append(entry.jid)
        assert entry.delete()
    assert seen == [f"d{index}" for index in reversed(range(130))]
    assert dead.size == 0


@pytest.mark.cluster
def test_find_job_does_not_treat_the_jid_as_a_pattern(config: kiq.Config) -> None:
    retries = RetrySet(config)
    retries.schedule(1.0, json.loads(job_json("abc")))
    assert retries.find_job("*") is None and retries.find_job("a?c") is None
    assert retries.find_job("abc") is not None


# -- processes and running jobs ----------------------------------------------------------------------------
def register(r: redis.Redis, identity: str, busy: int = 0, quiet: bool = False, **info: Any) -> None:
    keys = kiq.ext.keyspace(r)
    r.sadd(keys.key("processes"), identity)
    details = {"identity": identity, "hostname": "host", "pid": 1, "concurrency": 5, "queues": ["default"], **info}
    r.hset(
        keys.key(identity),
        mapping={"info": json.dumps(details), "busy": busy, "beat": time.time(), "quiet": str(quiet).lower()},
    )
    r.expire(keys.key(identity), 60)


@pytest.mark.cluster
def test_process_set_lists_live_processes_and_signals_them(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    register(r, "host:1:aaa", busy=2, tag="web")
    register(r, "host:2:bbb", quiet=True)
    r.sadd(keys.key("processes"), "host:3:gone")  # its heartbeat hash expired
    processes = ProcessSet(config)
    assert processes.size == 2  # cleaned up on creation
    listed = list(processes)
    assert [p.identity for p in listed] == ["host:1:aaa", "host:2:bbb"]
    assert (listed[0].busy, listed[0].tag, listed[0].stopping, listed[1].stopping) == (2, "web", False, True)
    assert processes.total_concurrency == 10

    processes.get("host:1").quiet()
    processes.get("host:2:bbb").dump_threads()
    assert processes.stop() == 2
    assert r.lrange(keys.key("host:1:aaa-signals"), 0, -1) == ["TERM", "TSTP"]
    assert r.lrange(keys.key("host:2:bbb-signals"), 0, -1) == ["TERM", "TTIN"]
    assert 0 < r.ttl(keys.key("host:1:aaa-signals")) <= 60
    with pytest.raises(KiqError, match="matches 2"):
        processes.get("host:")
    with pytest.raises(KiqError, match="no live process"):
        processes.quiet("other")


@pytest.mark.cluster
def test_process_state_running_quiet_or_stale(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    """A killed process keeps its hash for 60 s: it is stale once its last beat is 2.5 intervals old (its own
    ``heartbeat_interval`` from ``info``, else Sidekiq's 10 s)."""
    register(r, "host:1:aaa")
    register(r, "host:2:bbb", quiet=True)
    register(r, "host:3:ccc", heartbeat_interval=2)
    register(r, "host:4:ddd")
    r.hset(keys.key("host:3:ccc"), "beat", time.time() - 6)  # 2.5 x 2 s = 5 s
    r.hset(keys.key("host:4:ddd"), "beat", time.time() - 24)  # no interval given: 10 s, stale after 25 s
    processes = {process.identity: process for process in ProcessSet(config)}
    assert {identity: process.state for identity, process in processes.items()} == {
        "host:1:aaa": "running",
        "host:2:bbb": "quiet",
        "host:3:ccc": "stale",
        "host:4:ddd": "running",
    }
    assert (processes["host:3:ccc"].heartbeat_interval, processes["host:4:ddd"].heartbeat_interval) == (2.0, 10.0)
    assert 6 <= processes["host:3:ccc"].seconds_since_beat < 16
    assert processes["host:3:ccc"].as_dict()["state"] == "stale"


@pytest.mark.cluster
def test_workers_list_running_jobs(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    register(r, "host:1:aaa", busy=2)
    payload = json.loads(job_json("running"))
    # Sidekiq 7 stores the payload as a JSON string, Sidekiq 6 as an object: both are read
    r.hset(
        keys.key("host:1:aaa:work"),
        mapping={
            "t1": json.dumps({"queue": "default", "payload": json.dumps(payload), "run_at": time.time() - 5}),
            "t2": json.dumps({"queue": "low", "payload": payload, "run_at": time.time()}),
        },
    )
    works = list(Workers(config))
    assert [(w.process_id, w.thread_id, w.queue) for w in works] == [
        ("host:1:aaa", "t1", "default"),
        ("host:1:aaa", "t2", "low"),
    ]
    assert all(w.payload == payload == w.work["payload"] for w in works)
    assert Workers(config).size == 2 == Stats(config).workers_size


# -- Stats ---------------------------------------------------------------------------------------------
@pytest.mark.cluster
def test_stats(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    r.set(keys.key("stat:processed"), 42)
    r.set(keys.key("stat:failed"), 3)
    today = datetime.datetime.now(datetime.UTC).date()
    r.set(keys.key(f"stat:processed:{today.isoformat()}"), 7)
    for index in range(3):
        Hard.perform_async(index)
    Hard.set(queue="low").perform_async(0)
    Hard.perform_in(60)
    r.zadd(keys.key("retry"), {failed_json("r"): time.time()})
    r.zadd(keys.key("dead"), {failed_json("d1"): time.time(), failed_json("d2"): time.time()})
    register(r, "host:1:aaa", busy=3)

    stats = Stats(config)
    assert (stats.processed, stats.failed, stats.enqueued) == (42, 3, 4)
    assert (stats.scheduled_size, stats.retry_size, stats.dead_size) == (1, 1, 2)
    assert (stats.processes_size, stats.workers_size, stats.busy) == (1, 3, 3)
    assert stats.queues == {"default": 3, "low": 1}
    assert list(stats.queues) == ["default", "low"]
    history = stats.history(2)
    yesterday = (today - datetime.timedelta(days=1)).isoformat()
    assert history["processed"] == {today.isoformat(): 7, yesterday: 0}
    assert history["failed"] == {today.isoformat(): 0, yesterday: 0}
    assert stats.as_dict()["queues"] == {"default": 3, "low": 1}


def test_quiet_and_stop_a_running_worker(e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("-r", "tests.jobs.api", "-c", "2", env={"KIQ_HEARTBEAT_INTERVAL": "1"})
    processes = ProcessSet(e2e_config)
    wait_until(lambda: processes.size == 1, 30, message=f"the worker to register\n{worker.output()}")
    (process,) = list(processes)
    assert process["pid"] == worker.pid and not process.stopping

    RecordRun.perform_async("before quiet")
    wait_until(lambda: e2e_config.redis.llen(RUNS_KEY) == 1, 30, message="the job to run")

    assert processes.quiet() == 1
    wait_until(lambda: [p.stopping for p in processes] == [True], 30, message=f"the worker to quiet\n{worker.output()}")
    assert worker.running  # quiet is not stop

    assert processes.stop(process.identity) == 1
    assert worker.wait(30) == 0
    assert processes.size == 0  # it deregistered on the way out
