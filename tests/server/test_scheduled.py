"""The Poller: due jobs move from retry/schedule to their queues through the client; timing; process cleanup."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.middleware import ClientMiddleware, Wrapper
from kiq.payload import dumps
from kiq.pipeline import follow_new_master
from kiq.server.scheduled import Poller
from tests.jobs.api import RUNS_KEY, RecordRun
from tests.support import WorkerProcess, connection_ids, raw_redis, run_async, wait_until


def job_json(jid: str, queue: str = "default", **extra: Any) -> str:
    return dumps({"class": "Hard", "args": [1], "jid": jid, "queue": queue, "retry": True, **extra})


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(kiq.ext.keyspace(r).queue(queue), 0, -1))]


class StampMiddleware(ClientMiddleware):
    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
        job["stamped"] = job.get("stamped", 0) + 1
        yield


@pytest.mark.cluster
def test_moves_due_jobs_from_retry_and_schedule_through_client_middleware(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    config.client_middleware.add(StampMiddleware)
    now = time.time()
    r.zadd(keys.key("retry"), {job_json("r-due", "low", retry_count=0, error_class="E"): now - 5})
    r.zadd(keys.key("retry"), {job_json("r-later"): now + 60})
    r.zadd(keys.key("schedule"), {job_json("s-due"): now - 1, job_json("s-later"): now + 60})

    assert Poller(config).enqueue_jobs() == 2

    low, default = queued(r, "low"), queued(r, "default")
    assert [job["jid"] for job in low] == ["r-due"]
    assert [job["jid"] for job in default] == ["s-due"]
    for job in low + default:
        assert job["stamped"] == 1  # client middleware ran again
        assert now - 1 <= job["enqueued_at"] <= time.time()
    assert low[0]["retry_count"] == 0 and low[0]["error_class"] == "E"  # the payload is otherwise kept
    assert r.smembers(keys.key("queues")) == {"low", "default"}
    assert [json.loads(m)["jid"] for m in r.zrange(keys.key("retry"), 0, -1)] == ["r-later"]
    assert [json.loads(m)["jid"] for m in r.zrange(keys.key("schedule"), 0, -1)] == ["s-later"]


@pytest.mark.cluster
def test_now_decides_what_is_due(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    now = time.time()
    r.zadd(keys.key("schedule"), {job_json("a"): now + 10, job_json("b"): now + 20})
    poller = Poller(config)
    assert poller.enqueue_jobs(now=now + 15) == 1
    assert [job["jid"] for job in queued(r)] == ["a"]
    assert poller.enqueue_jobs(now=now + 15) == 0


@pytest.mark.cluster
def test_unparseable_job_goes_to_dead(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    deaths: list[dict[str, Any]] = []

    class Recorder:
        @kiq.hookimpl
        def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
            deaths.append(job)

    config.plugins.register(Recorder())
    r.zadd(keys.key("schedule"), {"{not json": time.time() - 1, dumps({"no": "class"}): time.time() - 1})
    r.zadd(keys.key("schedule"), {job_json("ok"): time.time() - 1})

    assert Poller(config).enqueue_jobs() == 1
    assert sorted(r.zrange(keys.key("dead"), 0, -1)) == sorted(["{not json", dumps({"no": "class"})])
    assert [job["jid"] for job in queued(r)] == ["ok"]
    assert r.zcard(keys.key("schedule")) == 0
    assert deaths == []  # like the processor: no death hook for a payload that is not a job


@pytest.mark.parametrize(
    "bad",
    [
        {"queue": 5},
        {"queue": ""},
        {"jid": 7},
        {"args": [float("nan")]},  # written as NaN by another producer: never pushable as strict JSON
        {"retry_for": "abc"},
        b'{"class":"Hard","args":["\xff"],"jid":"x","queue":"default"}',  # not UTF-8
    ],
    ids=repr,
)
def test_an_entry_that_can_never_be_enqueued_goes_to_dead_once_logged_once(
    config: kiq.Config, r: redis.Redis, bad: dict[str, Any] | bytes, caplog: pytest.LogCaptureFixture
) -> None:
    raw = bad if isinstance(bad, bytes) else json.dumps({"class": "Hard", "args": [1], "jid": "x", **bad}).encode()
    r.zadd("retry", {raw: time.time() - 1})
    r.zadd("retry", {job_json("fine").encode(): time.time() - 1})
    poller = Poller(config)
    for _ in range(3):
        poller.enqueue_jobs()
    assert r.zcard("retry") == 0
    assert [job["jid"] for job in queued(r)] == ["fine"]
    assert raw_redis(config).zrange("dead", 0, -1) == [raw]  # byte for byte as it was stored
    assert caplog.text.count("can never be enqueued") == 1


@pytest.mark.cluster
def test_failing_middleware_keeps_the_job_for_a_later_poll(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    class Broken(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            raise RuntimeError("middleware down")
            yield

    errors: list[BaseException] = []

    class Recorder:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any], config: kiq.Config) -> None:
            errors.append(exc)

    config.plugins.register(Recorder())
    config.client_middleware.add(Broken)
    raw = job_json("kept")
    r.zadd(keys.key("schedule"), {raw: time.time() - 1})

    assert Poller(config).enqueue_jobs() == 0
    score = r.zscore(keys.key("schedule"), raw)
    assert score is not None and score > time.time()  # not in a hot loop: due again at the next poll
    assert r.llen(keys.queue("default")) == 0
    assert [str(e) for e in errors] == ["middleware down"]


@pytest.mark.cluster
def test_terminate_is_prompt(config: kiq.Config) -> None:
    config.poll_interval = 30
    poller = Poller(config)
    poller.start()
    started = time.monotonic()
    poller.terminate()
    assert time.monotonic() - started < 2
    assert poller._thread is not None and not poller._thread.is_alive()


@pytest.mark.cluster
def test_thread_polls_repeatedly(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    config.poll_interval = 0.1
    poller = Poller(config)
    poller.start()
    try:
        r.zadd(keys.key("schedule"), {job_json("first"): time.time()})
        wait_until(lambda: r.llen(keys.queue("default")) == 1, 20, message="first job enqueued")
        r.zadd(keys.key("schedule"), {job_json("second"): time.time()})
        wait_until(lambda: r.llen(keys.queue("default")) == 2, 20, message="second job enqueued")
    finally:
        poller.terminate()


def test_redis_outage_does_not_kill_the_thread(config: kiq.Config) -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    broken = kiq.Config(redis_url=f"redis://127.0.0.1:{port}/0", poll_interval=0.1)
    errors: list[dict[str, Any]] = []

    class Recorder:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any], config: kiq.Config) -> None:
            errors.append(context)

    broken.plugins.register(Recorder())
    poller = Poller(broken)
    poller.start()
    try:
        wait_until(lambda: len(errors) >= 4, 20, message="several failed polls")
        assert poller._thread is not None and poller._thread.is_alive()
        assert any("enqueue_jobs" in context["context"] for context in errors)
    finally:
        poller.terminate()


def register(r: redis.Redis, identity: str, alive: bool) -> None:
    r.sadd("processes", identity)
    if alive:
        r.hset(identity, mapping={"info": json.dumps({"identity": identity}), "busy": 0, "beat": time.time()})
        r.expire(identity, 60)


@pytest.mark.parametrize(("processes", "low", "high"), [(0, 0.5, 1.5), (3, 1.5, 4.5), (12, 0.0, 12.0)])
def test_poll_interval_scales_with_live_processes(
    config: kiq.Config, r: redis.Redis, processes: int, low: float, high: float
) -> None:
    config.poll_interval = 1.0
    for index in range(processes):
        register(r, f"host:{index}:abc", alive=True)
    poller = Poller(config)
    intervals = [poller.random_poll_interval() for _ in range(300)]
    assert low <= min(intervals) and max(intervals) <= high
    assert min(intervals) < low + (high - low) * 0.2 and max(intervals) > high - (high - low) * 0.2  # spread out


def test_cleanup_prunes_dead_processes_once_a_minute(config: kiq.Config, r: redis.Redis) -> None:
    register(r, "host:1:alive", alive=True)
    register(r, "host:2:dead", alive=False)
    poller = Poller(config)
    assert poller._cleanup() == 1
    assert r.smembers("processes") == {"host:1:alive"}
    assert 0 < r.ttl("process_cleanup") <= 60

    register(r, "host:3:dead", alive=False)
    assert poller._cleanup() == 0  # the lock holds for a minute
    assert "host:3:dead" in r.smembers("processes")


def test_perform_in_runs_about_that_much_later_in_a_worker(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    r = e2e_config.redis
    worker = start_worker("-r", "tests.jobs.api", "-c", "2", env={"KIQ_POLL_INTERVAL": "0.5"})
    wait_until(lambda: r.scard("processes") == 1, 30, message=f"the worker to register\n{worker.output()}")

    pushed_at = time.time()
    RecordRun.perform_in(2, "later")
    RecordRun.perform_in(600, "much later")
    wait_until(lambda: r.llen(RUNS_KEY) >= 1, 30, message=f"the scheduled job to run\n{worker.output()}")

    (run,) = [json.loads(raw) for raw in r.lrange(RUNS_KEY, 0, -1)]
    assert run["label"] == "later"
    assert 1.0 <= run["at"] - pushed_at <= 3.0, run["at"] - pushed_at
    assert r.zcard("schedule") == 1  # the one due in 10 minutes stays
    assert worker.stop() == 0


@pytest.mark.cluster(only=True)
def test_a_due_job_for_a_queue_the_layout_cannot_have_goes_to_dead_once(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace, caplog: pytest.LogCaptureFixture
) -> None:
    """With slots = "queue", a queue named "}x" has no hash tag of its own: a scheduled job for it (a ZADD does not
    name its queue's key) can never be enqueued, so it goes to dead once instead of back every poll; the other due
    job is enqueued. With slots = "one" both are enqueued."""
    bad = json.dumps({"class": "Hard", "args": [1], "jid": "bad", "queue": "}x"})
    r.zadd(keys.key("schedule"), {bad: time.time() - 1, job_json("fine"): time.time() - 1})
    poller = Poller(config)
    for _ in range(3):
        poller.enqueue_jobs()
    assert r.zcard(keys.key("schedule")) == 0
    if keys.slots == "queue":
        assert r.zrange(keys.key("dead"), 0, -1) == [bad]
        assert caplog.text.count("can never be enqueued") == 1
    else:
        assert [kiq.ext.loads(job)["jid"] for job in r.lrange(keys.queue("}x"), 0, -1)] == ["bad"]
    assert [kiq.ext.loads(job)["jid"] for job in r.lrange(keys.queue("default"), 0, -1)] == ["fine"]


@pytest.mark.parametrize("slots", [None, "one", "queue"])
def test_the_wake_channel_is_the_schedule_key_with_its_name_changed(slots: kiq.keys.Slots | None) -> None:
    """kiq.ext.ENQUEUE_LUA builds the channel from the schedule key it is given (a script names no literal key)."""
    keys = kiq.keys.Keyspace(slots)
    assert keys.key(kiq.keys.POLLER_WAKE) == keys.key(kiq.keys.SCHEDULE)[: -len("schedule")] + "kiq:poller-wake"


@pytest.mark.cluster
def test_every_scheduled_push_publishes_its_due_time(config: kiq.Config) -> None:
    """What wakes the pollers: ``"<set> <score>"`` on the wake channel from a sync push, an asyncio push, a bulk
    push (its earliest job) and kiq.api's sets, on every key layout (a cluster pipeline carries the PUBLISH too)."""

    class Later(kiq.Job):
        def perform(self) -> None: ...

    pubsub = config.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(kiq.ext.keyspace(config.redis).key(kiq.keys.POLLER_WAKE))
    try:
        pubsub.get_message(timeout=2)  # the subscription's confirmation
        at = time.time() + 123_456_789  # a due time no other test uses (see below)
        Later.set(config=config).perform_at(at)
        run_async(config, lambda: Later.set(config=config).aio.perform_at(at + 1))
        kiq.Client(config).push_bulk({"class": Later, "args": [[], []], "at": [at + 3, at + 2]})
        kiq.api.RetrySet(config).schedule(at + 4, {"class": "Later", "args": [], "jid": "r" * 24})  # the API's
        kiq.api.DeadSet(config).schedule(at + 5, {"class": "Later", "args": [], "jid": "d" * 24})  # no poller's
        # pub/sub knows no databases: the other test processes on the server publish on this channel too
        messages, deadline = [], time.monotonic() + 2
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.1)
            if message is not None and at <= float(message["data"].split()[1]) <= at + 5:
                messages.append(message["data"])
        expected = [f"schedule {at!r}", f"schedule {at + 1!r}", f"schedule {at + 2!r}", f"retry {at + 4!r}"]
        assert messages == expected
    finally:
        pubsub.close()


@pytest.mark.parametrize("lost", ["killed", "master moved"])
def test_a_lost_subscription_is_made_again_and_what_was_missed_meanwhile_is_enqueued(
    config: kiq.Config, r: redis.Redis, lost: str
) -> None:
    """The wake-up subscription dropped (a failover, a proxy: killed here), or left on the old master when a worker
    on Sentinel with ``push_replicas`` moves to the new one (``follow_new_master``: its listening connection stays
    where it was, hearing no push made after the promotion; one server plays both masters here, the subscriber's
    connection id tells them apart). The poller subscribes again and then looks at both sets at once, for jobs
    whose message it missed, not at its next regular poll (30 s here)."""
    config.poll_interval = 30
    poller = Poller(config)
    poller.start()
    try:
        wait_until(lambda: poller._listener.subscribed.is_set(), 10, message="the wake-up subscription")
        time.sleep(0.2)  # the first pass is over
        [first] = connection_ids(r, kind="pubsub")
        r.zadd("schedule", {job_json("missed"): time.time()})  # as a push whose message nobody heard
        if lost == "killed":
            r.client_kill_filter(_id=first)
        else:
            follow_new_master(config.redis)
        wait_until(lambda: len(queued(r)) == 1, 5, message="the missed job enqueued after the re-subscription")
        assert connection_ids(r, kind="pubsub") not in (set(), {first})
        due = time.time() + 0.5
        r.zadd("schedule", {job_json("later"): due})
        r.publish("kiq:poller-wake", f"schedule {due!r}")  # heard again
        wait_until(lambda: len(queued(r)) == 2, 3, message="the job announced after the re-subscription")
    finally:
        poller.terminate()


def test_messages_that_do_not_parse_are_ignored_and_the_wake_up_goes_on(config: kiq.Config, r: redis.Redis) -> None:
    """Anyone may publish on the channel: bytes that are not UTF-8, NaN, a set that is not one of kiq's, a huge
    text are ignored; the next good message still wakes the poller."""
    config.poll_interval = 30
    poller = Poller(config)
    poller.start()
    try:
        wait_until(lambda: poller._listener.subscribed.is_set(), 10, message="the wake-up subscription")
        raw = raw_redis(config)
        for junk in (b"\xff\xfe\x00", b"schedule nan", b"schedule -inf x", b"dead 1", b"schedule", b"x" * 1_000_000):
            raw.publish("kiq:poller-wake", junk)
        due = time.time() + 0.3
        r.zadd("schedule", {job_json("good"): due})
        r.publish("kiq:poller-wake", f"schedule {due!r}")
        wait_until(lambda: len(queued(r)) == 1, 3, message="the job announced after the junk")
    finally:
        poller.terminate()
