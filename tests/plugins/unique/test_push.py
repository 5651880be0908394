"""Unique jobs at the push: one lock per (class, queue, arguments) holding the jid, duplicates dropped and counted,
bounded by a TTL, for single, scheduled and bulk pushes; wrong option values refused where they are pushed."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
import redis

import kiq
from kiq.plugins.unique import dropped_counts, lock_holder, lock_key
from tests.jobs.unique import Once
from tests.support import wait_until


@pytest.fixture
def config(config: kiq.Config) -> kiq.Config:
    config.add_plugin("unique")
    return config


def test_a_hundred_concurrent_pushes_of_one_job_enqueue_it_once_and_count_the_rest(
    config: kiq.Config, r: redis.Redis
) -> None:
    start = threading.Barrier(100)
    jids: list[str | None] = []

    def push() -> None:
        start.wait()
        jids.append(Once.perform_async(7))

    threads = [threading.Thread(target=push) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pushed = [jid for jid in jids if jid is not None]
    assert len(jids) == 100 and len(pushed) == 1
    (payload,) = r.lrange("queue:default", 0, -1)
    assert json.loads(payload)["jid"] == pushed[0]
    assert lock_holder(Once, [7]) == pushed[0]
    assert dropped_counts(config) == {"UniqueOnce": 99}


def test_the_lock_holds_the_jid_for_unique_for_seconds(config: kiq.Config, r: redis.Redis) -> None:
    jid = Once.perform_async(1)
    key = lock_key("UniqueOnce", "default", [1])
    assert r.get(key) == jid
    assert 59_000 < r.pttl(key) <= 60_000
    assert json.loads(r.lindex("queue:default", 0))["unique_key"] == key


def test_other_arguments_or_another_queue_are_other_jobs(config: kiq.Config, r: redis.Redis) -> None:
    assert Once.perform_async(1) is not None
    assert Once.perform_async(2) is not None
    assert Once.set(queue="low").perform_async(1) is not None
    assert Once.perform_async({"b": 1, "a": 2}) is not None
    assert Once.perform_async({"a": 2, "b": 1}) is None  # equal arguments, whatever the order of their keys
    assert r.llen("queue:default") == 3 and r.llen("queue:low") == 1


def test_a_scheduled_job_holds_its_lock_until_unique_for_after_it_is_due(config: kiq.Config, r: redis.Redis) -> None:
    jid = Once.perform_in(3600, 1)
    assert jid is not None and Once.perform_async(1) is None
    assert 3600 + 59 < r.pttl(lock_key("UniqueOnce", "default", [1])) / 1000 <= 3660
    assert r.zcard("schedule") == 1 and not r.exists("queue:default")


def test_unique_for_false_pushes_without_the_lock(config: kiq.Config, r: redis.Redis) -> None:
    first = Once.perform_async(1)
    bypass = Once.set(unique_for=False).perform_async(1)
    assert first is not None and bypass is not None
    assert lock_holder(Once, [1]) == first  # the bypass neither took nor touched the lock
    assert r.llen("queue:default") == 2
    assert "unique_key" not in json.loads(r.lindex("queue:default", 0))


def test_perform_bulk_pushes_each_distinct_job_once(config: kiq.Config, r: redis.Redis) -> None:
    Once.perform_async(3)
    jids = Once.perform_bulk([[1], [2], [1], [3], [2]])
    assert [jid is not None for jid in jids] == [True, True, False, False, False]
    assert r.llen("queue:default") == 3
    assert dropped_counts(config) == {"UniqueOnce": 3}


def test_a_bulk_that_writes_nothing_leaves_no_lock_behind(config: kiq.Config, r: redis.Redis) -> None:
    with pytest.raises(kiq.JobArgumentError):
        Once.perform_bulk([[1], [2], [float("nan")]])  # the third is refused after the first two took their locks
    assert not r.exists("queue:default")
    assert lock_holder(Once, [1]) is None and lock_holder(Once, [2]) is None
    assert Once.perform_async(1) is not None


def test_a_refused_push_releases_its_lock(config: kiq.Config, r: redis.Redis) -> None:
    with pytest.raises(kiq.JobArgumentError):
        Once.perform_async(float("nan"))
    assert not list(r.scan_iter(match="kiq:unique:lock:*"))


def test_a_push_dropped_by_an_inner_middleware_releases_its_lock(config: kiq.Config, r: redis.Redis) -> None:
    class DropAll(kiq.ClientMiddleware):
        def call(self, job_class: type[kiq.Job] | str, job: dict[str, object], queue: str,
                 redis: redis.Redis) -> kiq.Wrapper:  # fmt: skip
            return
            yield

    config.client_middleware.add(DropAll)
    assert Once.perform_async(1) is None
    assert lock_holder(Once, [1]) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": "600"}, "option 'unique_for' must be a number of seconds > 0"),
        ({"unique_for": 0}, "option 'unique_for' must be a number of seconds > 0"),
        ({"unique_for": -5}, "option 'unique_for' must be a number of seconds > 0"),
        ({"unique_for": True}, "option 'unique_for' must be a number of seconds > 0"),
        ({"unique_until": "end"}, "option 'unique_until' must be 'success' or 'start', got 'end'"),
    ],
)
def test_wrong_option_values_are_refused_at_the_push(
    config: kiq.Config, r: redis.Redis, options: dict[str, object], message: str
) -> None:
    with pytest.raises(kiq.InvalidJobError, match=message):
        Once.set(**options).perform_async(1)
    with pytest.raises(kiq.InvalidJobError, match=message):
        Once.set(**options).perform_bulk([[1], [2]])
    assert r.dbsize() == 0


def test_a_misspelt_option_is_refused_with_a_did_you_mean(config: kiq.Config) -> None:
    with pytest.raises(kiq.ConfigError, match="unknown job option 'unique_fr' \\(did you mean 'unique_for'\\?\\)"):
        Once.set(unique_fr=60).perform_async(1)


def test_the_lock_expires_by_its_ttl(config: kiq.Config) -> None:
    jid = Once.set(unique_for=0.3).perform_async(1)
    assert jid is not None and Once.perform_async(1) is None
    wait_until(lambda: lock_holder(Once, [1]) is None, 5, message="the lock to expire")
    assert Once.perform_async(1) is not None


def test_keyword_arguments_are_part_of_the_lock_and_a_job_without_them_keeps_its_key(
    config: kiq.Config, r: redis.Redis
) -> None:
    identity = json.dumps(["UniqueOnce", "default", [1]], separators=(",", ":")).encode()
    assert lock_key("UniqueOnce", "default", [1]) == "kiq:unique:lock:" + hashlib.sha256(identity).hexdigest()
    assert lock_key("UniqueOnce", "default", [1], {}) == lock_key("UniqueOnce", "default", [1])
    first = Once.perform_async(number=1)
    assert first is not None and Once.perform_async(number=1) is None  # the same keyword arguments: a duplicate
    assert Once.perform_async(number=2) is not None and Once.perform_async(1) is not None
    assert lock_holder(Once, [], kwargs={"number": 1}) == first
