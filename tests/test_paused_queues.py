"""The paused set and the per-process view the fetchers consult: read at most once per refresh interval, shared
by a process's fetchers, and a queue order without the paused queues that keeps Sidekiq's strict and weighted
semantics for the rest."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis

import kiq
import kiq.ext
from kiq.fetcher import MAX_BLOCK, Capsule, QueueOrder
from kiq.paused_queues import REFRESH_INTERVAL, PausedQueues, paused_queues
from kiq.server.fetch import BasicFetch
from tests.sentinel_support import free_port
from tests.support import wait_until


def test_the_paused_set_is_read_once_per_interval_then_again(config: kiq.Config, r: redis.Redis) -> None:
    view = PausedQueues(r, interval=0.3)
    assert view.keys() == frozenset()
    kiq.Queue("mail", config).pause()
    assert view.keys() == frozenset()  # read less than an interval ago: the answer stands
    assert wait_until(view.keys, 5) == frozenset({"queue:mail"})
    kiq.Queue("mail", config).unpause()
    wait_until(lambda: not view.keys(), 5)


def test_before_its_first_answer_a_thread_waits_for_the_read_under_way(config: kiq.Config, r: redis.Redis) -> None:
    """Two fetching threads (two leaders, or two capsules) ask at once when a worker starts: the one that does not
    read must not take the empty view it starts with for "nothing paused" (it fetched a paused queue's job)."""
    kiq.Queue("held", config).pause()
    view = PausedQueues(r)
    answers: list[frozenset[str]] = []
    with view._reading:  # the first read under way, in another thread
        asking = threading.Thread(target=lambda: answers.append(view.keys()))
        asking.start()
        asking.join(0.3)
        assert asking.is_alive() and not answers  # it waits, rather than answer with no read yet
    asking.join(5)
    assert answers == [frozenset({"queue:held"})]


def test_a_first_read_that_fails_raises_rather_than_answer_nothing_paused() -> None:
    view = PausedQueues(redis.Redis(port=free_port(), socket_connect_timeout=0.5))
    with pytest.raises(redis.ConnectionError):
        view.keys()


def test_the_promise_of_a_second_holds_by_construction() -> None:
    # a fetch may start with a view REFRESH_INTERVAL old and block MAX_BLOCK: both within the second promised
    assert REFRESH_INTERVAL + MAX_BLOCK < 1.0


def test_one_view_per_redis_client_is_shared(config: kiq.Config) -> None:
    assert paused_queues(config.redis) is paused_queues(config.redis)
    first = Capsule("default", [("a", 0)], 1, config).queue_order()
    second = Capsule("other", [("b", 0)], 1, config).queue_order()
    assert first.paused is second.paused is paused_queues(config.redis)


def test_strict_order_skips_the_paused_queue_and_keeps_the_rest_in_order(config: kiq.Config) -> None:
    view = PausedQueues(config.redis, interval=0.0)
    order = QueueOrder([("high", 0), ("mid", 0), ("low", 0)], "strict", view)
    kiq.Queue("mid", config).pause()
    assert order.keys() == ["queue:high", "queue:low"] and order.distinct == ["queue:high", "queue:low"]
    kiq.Queue("high", config).pause()
    kiq.Queue("low", config).pause()
    assert order.keys() == [] and order.distinct == []
    for name in ("high", "mid", "low"):
        kiq.Queue(name, config).unpause()
    assert order.keys() == ["queue:high", "queue:mid", "queue:low"]


def test_weighted_order_keeps_the_weights_of_the_queues_left(config: kiq.Config) -> None:
    view = PausedQueues(config.redis, interval=0.0)
    order = QueueOrder([("high", 3), ("low", 1), ("bulk", 4)], "weighted", view)
    kiq.Queue("bulk", config).pause()
    counts = Counter(order.keys()[0] for _ in range(4000))
    assert set(counts) == {"queue:high", "queue:low"}
    assert 0.70 < counts["queue:high"] / 4000 < 0.80  # 3 of 4, as without the paused queue


def test_basic_fetch_with_every_queue_paused_waits_and_takes_nothing(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:only", "job-1")
    kiq.Queue("only", config).pause()
    fetch = BasicFetch(Capsule("default", [("only", 0)], 1, config))
    fetch.order.paused = PausedQueues(r, interval=0.0)
    fetch.block_seconds = 0.3
    assert fetch.retrieve_work() is None
    assert r.llen("queue:only") == 1
    kiq.Queue("only", config).unpause()
    unit = fetch.retrieve_work()
    assert unit is not None and unit.job == "job-1"
    fetch.close()


def test_queue_api_reports_and_toggles_the_pause(config: kiq.Config, r: redis.Redis) -> None:
    queue = kiq.Queue("reports", config)
    assert not queue.paused
    assert queue.pause() is True and queue.pause() is False
    assert queue.paused and r.smembers("kiq:paused") == {"reports"}
    assert queue.unpause() is True and queue.unpause() is False
    assert not queue.paused and not r.exists("kiq:paused")


@pytest.mark.cluster(only=True)
def test_a_name_no_queue_can_have_is_refused_at_pause_and_skipped_when_another_program_paused_it(
    config: kiq.Config, r: redis.Redis
) -> None:
    """With slots = "queue", "}x" gives its keys no common hash tag: a pause of it is refused naming the fix, and
    one another program wrote into the paused set costs the fetchers nothing (the other paused queues hold)."""
    keys = kiq.ext.keyspace(r)
    view = PausedQueues(r, interval=0.0)
    kiq.Queue("mail", config).pause()
    if keys.slots == "queue":
        with pytest.raises(ValueError, match="rename the queue"):
            kiq.Queue("}x", config).pause()
        r.sadd(keys.key("kiq:paused"), "}x")  # another program's write
        assert view.keys() == frozenset({keys.queue("mail")})
    else:  # one slot for everything: any name is a queue
        kiq.Queue("}x", config).pause()
        assert view.keys() == frozenset({keys.queue("mail"), keys.queue("}x")})
