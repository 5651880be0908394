"""The client writes exactly Sidekiq 7's keys and job JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
import redis

import kiq
import kiq.api
import kiq.client
import kiq.ext
import kiq.job_writes
from tests.support import run_async as run

T = TypeVar("T")


class HardJob(kiq.Job):
    kiq_name = "HardJob"

    def perform(self, *args: Any) -> None: ...


class CriticalJob(kiq.Job):
    kiq_options = {"queue": "critical", "retry": 5, "backtrace": True, "tags": ["a"]}

    def perform(self, *args: Any) -> None: ...


def only_job(r: redis.Redis, key: str) -> dict[str, Any]:
    values = r.lrange(key, 0, -1)
    assert len(values) == 1, values
    return json.loads(values[0])  # type: ignore[no-any-return]


@pytest.mark.cluster
def test_push_writes_sidekiq_7_json(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    before = time.time()
    jid = HardJob.perform_async(1, "two", {"three": [3.0]})
    after = time.time()
    raw = r.lrange(keys.queue("default"), 0, -1)[0]
    job = json.loads(raw)
    assert list(job) == ["retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"]
    assert job["class"] == "HardJob"
    assert job["args"] == [1, "two", {"three": [3.0]}]
    assert job["jid"] == jid and len(jid) == 24 and int(jid, 16) >= 0
    assert job["queue"] == "default" and job["retry"] is True
    assert isinstance(job["created_at"], float) and isinstance(job["enqueued_at"], float)
    assert before <= job["created_at"] <= job["enqueued_at"] <= after
    assert r.smembers(keys.key("queues")) == {"default"}
    assert r.type(keys.queue("default")) == "list"
    assert raw.startswith('{"retry":true,"queue":"default","class":"HardJob"')  # compact, like Ruby's JSON


@pytest.mark.cluster
def test_class_options_and_default_wire_name(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    CriticalJob.perform_async()
    job = only_job(r, keys.queue("critical"))
    assert job["class"] == "tests.test_client.CriticalJob"
    assert job["retry"] == 5 and job["backtrace"] is True and job["tags"] == ["a"]


@pytest.mark.cluster
def test_set_overrides_options_for_one_push(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    CriticalJob.set(queue="low", retry=False).perform_async(7)
    job = only_job(r, keys.queue("low"))
    assert job["retry"] is False and job["args"] == [7]
    assert r.llen(keys.queue("critical")) == 0


@pytest.mark.cluster
def test_lpush_then_brpop_is_fifo(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    first = HardJob.perform_async(1)
    HardJob.perform_async(2)
    assert json.loads(r.brpop([keys.queue("default")], 1)[1])["jid"] == first  # type: ignore[index]


@pytest.mark.cluster
def test_perform_in_goes_to_schedule_without_enqueued_at(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    jid = HardJob.perform_in(300, 1)
    [(member, score)] = r.zrange(keys.key("schedule"), 0, -1, withscores=True)
    job = json.loads(member)
    assert job["jid"] == jid
    assert "enqueued_at" not in job and "at" not in job
    assert abs(score - (time.time() + 300)) < 5
    assert r.llen(keys.queue("default")) == 0


@pytest.mark.cluster
def test_perform_at_timestamp_and_past_times_enqueue_now(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    at = time.time() + 60
    HardJob.perform_at(at, 1)
    assert r.zscore(keys.key("schedule"), r.zrange(keys.key("schedule"), 0, 0)[0]) == pytest.approx(at)
    HardJob.perform_at(time.time() - 10, 2)  # due already: straight to the queue, as Sidekiq does
    assert json.loads(r.lindex(keys.queue("default"), 0))["args"] == [2]  # type: ignore[arg-type]


@pytest.mark.cluster
def test_push_bulk_batches_and_returns_jids(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    commands: list[int] = []

    class CountPipelines(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            commands.append(1)
            yield

    config.client_middleware.add(CountPipelines)
    jids = HardJob.perform_bulk([[i] for i in range(2500)])
    assert len(jids) == 2500 and len(set(jids)) == 2500
    assert len(commands) == 2500  # middleware runs for each job
    assert r.llen(keys.queue("default")) == 2500
    assert json.loads(r.rpop(keys.queue("default")))["args"] == [0]  # type: ignore[arg-type]


@pytest.mark.own_redis  # reads the server-wide command stats: no other test process may count there
def test_push_bulk_writes_1000_per_round_trip(config: kiq.Config, r: redis.Redis) -> None:
    r.config_resetstat()
    HardJob.perform_bulk([[i] for i in range(2500)])
    stats = r.info("commandstats")
    assert stats["cmdstat_lpush"]["calls"] == 3  # batches of 1000, 1000, 500


@pytest.mark.cluster
def test_push_bulk_with_at_list(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    now = time.time()
    kiq.Client().push_bulk({"class": HardJob, "args": [[1], [2]], "at": [now + 100, now + 200]})
    scores = sorted(score for _, score in r.zrange(keys.key("schedule"), 0, -1, withscores=True))
    assert scores == [pytest.approx(now + 100), pytest.approx(now + 200)]


@pytest.mark.cluster
def test_bad_argument_writes_nothing(r: redis.Redis) -> None:
    with pytest.raises(kiq.JobArgumentError, match=r"args\[1\]\[0\]"):
        HardJob.perform_async(1, [{1, 2}])
    with pytest.raises(kiq.JobArgumentError, match=r"args\[0\]"):
        HardJob.perform_bulk([[1]] * 1500 + [[b"bytes"]])
    assert r.dbsize() == 0


@pytest.mark.cluster
def test_push_by_wire_name_without_a_class(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    kiq.Client().push({"class": "Ruby::Mailer", "args": [1], "queue": "mail"})
    job = only_job(r, keys.queue("mail"))
    assert job["class"] == "Ruby::Mailer" and job["retry"] is True


@pytest.mark.parametrize(
    "item",
    [
        {"class": HardJob, "args": "not a list"},
        {"args": [1]},
        {"class": HardJob, "args": [], "at": "soon"},
        {"class": HardJob, "args": [], "jid": 5},
        {"class": HardJob, "args": [], "queue": ""},
        {"class": HardJob, "args": [], "retry_for": float("inf")},
        {"class": "Ruby::Mailer", "args": [], "retry_for": "a day"},
    ],
)
@pytest.mark.cluster
def test_malformed_items_are_refused(r: redis.Redis, item: dict[str, Any]) -> None:
    # InvalidJobError (a TypeError and ValueError): the poller moves such a job to the dead set, not back in a loop
    with pytest.raises(kiq.errors.InvalidJobError):
        kiq.Client().push(item)
    assert r.dbsize() == 0


@pytest.mark.cluster
def test_function_job(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    @kiq.job(queue="mail", name="Receipts")
    def send_receipt(order_id: int) -> int:
        return order_id * 2

    assert send_receipt(21) == 42  # still a plain function when called
    jid = send_receipt.perform_async(9)
    job = only_job(r, keys.queue("mail"))
    assert job == {**job, "class": "Receipts", "args": [9], "jid": jid}
    assert kiq.registry.get("Receipts") is send_receipt.job_class
    with pytest.raises(TypeError, match="missing a required argument: 'order_id'"):
        send_receipt.perform_async(order=1)  # type: ignore[call-arg]


@pytest.fixture
def other(config: kiq.Config) -> Iterator[redis.Redis]:
    """Another client of the config's Redis, as another process would have (its own pool, decoded replies)."""
    client = redis.Redis.from_url(str(config.redis_url), decode_responses=True)
    yield client
    client.close()


def test_a_queue_is_listed_again_once_queue_listed_for_has_passed(
    r: redis.Redis, other: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    HardJob.perform_async(1)
    assert r.smembers("queues") == {"default"}
    other.srem("queues", "default")  # e.g. another process cleared the queue
    HardJob.perform_async(2)  # within the second: not added again
    assert r.smembers("queues") == set()
    monkeypatch.setattr(kiq.job_writes, "QUEUE_LISTED_FOR", 0.05)
    time.sleep(0.06)  # what is checked is the time passed since the queue was added
    HardJob.perform_async(3)
    assert r.smembers("queues") == {"default"}
    assert r.llen("queue:default") == 3


@pytest.mark.cluster
def test_a_cleared_queue_is_listed_again_by_the_next_push(r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    HardJob.perform_async(1)
    assert kiq.api.Queue("default").clear() == 1
    assert r.smembers(keys.key("queues")) == set()
    HardJob.perform_async(2)
    assert r.smembers(keys.key("queues")) == {"default"}
    assert [job["args"] for job in map(json.loads, r.lrange(keys.queue("default"), 0, -1))] == [[2]]


def test_a_failed_write_leaves_its_queue_unlisted_for_the_next_push(r: redis.Redis, other: redis.Redis) -> None:
    other.set("queue:broken", "a string, not a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        HardJob.set(queue="broken").perform_async(1)
    other.delete("queue:broken")
    other.srem("queues", "broken")
    HardJob.set(queue="broken").perform_async(2)  # at once: the failed write did not count as listing the queue
    assert r.smembers("queues") == {"broken"}
    assert r.llen("queue:broken") == 1


def test_a_bulk_push_lists_every_queue_it_writes_and_a_scheduled_push_none(
    config: kiq.Config, r: redis.Redis, other: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ByFirstArgument(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            job["queue"] = job["args"][0]
            yield

    config.client_middleware.add(ByFirstArgument)
    HardJob.perform_in(60, "later")
    assert r.smembers("queues") == set()  # a scheduled job's queue is listed when the job is enqueued
    HardJob.perform_bulk([["a"], ["b"], ["c"], ["a"]])
    assert r.smembers("queues") == {"a", "b", "c"}
    assert [r.llen(f"queue:{queue}") for queue in "abc"] == [2, 1, 1]
    other.srem("queues", "a", "b", "c")
    HardJob.perform_bulk([["a"], ["b"]])  # within the second: not added again
    assert r.smembers("queues") == set()
    monkeypatch.setattr(kiq.job_writes, "QUEUE_LISTED_FOR", 0.0)
    HardJob.perform_bulk([["b"], ["c"]])
    assert r.smembers("queues") == {"b", "c"}


def test_an_async_push_lists_its_queue_once_per_queue_listed_for(
    config: kiq.Config, r: redis.Redis, other: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def pushes() -> list[set[Any]]:
        client = kiq.AsyncClient(config)
        await client.push({"class": HardJob, "args": [1], "queue": "aio"})
        seen = [r.smembers("queues")]
        other.srem("queues", "aio")
        await HardJob.set(config=config, queue="aio").aio.perform_async(2)  # within the second: not added again
        seen.append(r.smembers("queues"))
        monkeypatch.setattr(kiq.job_writes, "QUEUE_LISTED_FOR", 0.0)
        await client.push_bulk({"class": HardJob, "args": [[3], [4]], "queue": "aio"})
        seen.append(r.smembers("queues"))
        return seen

    assert run(config, pushes) == [{"aio"}, set(), {"aio"}]
    assert r.llen("queue:aio") == 4


@pytest.mark.cluster
def test_a_cleared_queue_is_listed_again_by_the_next_async_push(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    async def pushes() -> None:
        client = kiq.AsyncClient(config)
        await client.push({"class": HardJob, "args": [1]})
        kiq.api.Queue("default", config).clear()
        await client.push({"class": HardJob, "args": [2]})

    run(config, pushes)
    assert r.llen(keys.queue("default")) == 1
    assert r.smembers(keys.key("queues")) == {"default"}


def test_a_push_that_no_replica_confirms_raises_not_replicated_and_stays_written(
    config: kiq.Config, r: redis.Redis
) -> None:
    """``push_replicas`` on a Redis without replicas: the WAIT comes back short, the push raises NotReplicated naming
    the counts, and the job is in the queue all the same (a failover could lose it; it was written)."""
    config.push_replicas = 1
    config.push_replicas_timeout = 0.01
    with pytest.raises(kiq.NotReplicated, match="0 of 1 replicas"):
        kiq.Client(config).push({"class": "Replicated", "args": [1]})
    with pytest.raises(kiq.NotReplicated, match="0 of 1 replicas"):
        run(config, lambda: kiq.AsyncClient(config).push({"class": "Replicated", "args": [2]}))
    assert r.llen("queue:default") == 2
    config.push_replicas = 0  # no WAIT: nothing to confirm
    kiq.Client(config).push({"class": "Replicated", "args": [3]})
    assert r.llen("queue:default") == 3
