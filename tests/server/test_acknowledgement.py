"""``kiq.ext.hold_acknowledgement``: a plugin keeps a finished job in Redis until its own record is durable.

Run with the real Processor and the reliable fetcher against a real Redis: a held job stays in the working list
(a crash now would run it again) until every holder released it; a job that is not to be acknowledged (requeued
by a stop) stays unacknowledged whatever the holders do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.errors import Shutdown
from kiq.fetcher import Capsule
from kiq.middleware import ServerMiddleware, Wrapper
from kiq.payload import dumps
from kiq.plugins.reliable_fetch import ReliableFetch
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor

IDENTITY = "host:1:aaaaaaaaaaaa"
WORKING = f"kiq:working:{IDENTITY}:default"
releases: list[Callable[[], None] | None] = []


class Holding(ServerMiddleware):
    """Holds the acknowledgement of every job, ``holds`` times, and keeps the releases for the test."""

    holds = 1

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
        yield
        releases.extend(kiq.ext.hold_acknowledgement() for _ in range(self.holds))


class Finishes(kiq.Job):
    def perform(self) -> None: ...


class Interrupted(kiq.Job):
    def perform(self) -> None:
        raise Shutdown


@pytest.fixture
def setup(config: kiq.Config, r: redis.Redis) -> Iterator[tuple[ReliableFetch, Processor]]:
    releases.clear()
    config.server_middleware.add(Holding)
    config.add_plugin("reliable_fetch")
    fetch = ReliableFetch(Capsule("default", [("default", 0)], 1, config, IDENTITY))
    fetch.quiet()  # acknowledgements go out at once instead of with the next fetch
    processor = Processor(config, fetch, threading.Event(), RedisOutage(config), "test")
    yield fetch, processor
    fetch.close()
    Holding.holds = 1


def run_one(r: redis.Redis, fetch: ReliableFetch, processor: Processor, job_class: type[kiq.Job]) -> str:
    job = dumps({"class": job_class.kiq_name, "args": [], "jid": "j1", "queue": "default", "retry": False})
    r.lpush("queue:default", job)
    unit = fetch.retrieve_work()
    assert unit is not None
    processor.process(unit)
    return job


def test_a_held_job_stays_in_redis_until_every_holder_releases_it(
    setup: tuple[ReliableFetch, Processor], r: redis.Redis
) -> None:
    fetch, processor = setup
    Holding.holds = 2
    job = run_one(r, fetch, processor, Finishes)
    first, second = releases
    assert first is not None and second is not None
    assert r.lrange(WORKING, 0, -1) == [job]  # finished, but its outcome is not durable yet
    first()
    first()  # a second call does not release the other holder's share
    assert r.lrange(WORKING, 0, -1) == [job]
    second()
    assert r.lrange(WORKING, 0, -1) == []


def test_a_release_from_another_thread_acknowledges(setup: tuple[ReliableFetch, Processor], r: redis.Redis) -> None:
    fetch, processor = setup
    run_one(r, fetch, processor, Finishes)
    [release] = releases
    assert release is not None
    thread = threading.Thread(target=release)
    thread.start()
    thread.join(5)
    assert r.llen(WORKING) == 0


def test_a_job_that_must_not_be_acknowledged_stays_whatever_the_holders_do(
    setup: tuple[ReliableFetch, Processor], r: redis.Redis
) -> None:
    """A hard shutdown interrupted it (it was requeued): releasing its holds must not acknowledge it."""

    class HoldThenShutdown(ServerMiddleware):
        def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
            releases.append(kiq.ext.hold_acknowledgement())
            yield

    fetch, processor = setup
    processor.config.server_middleware.add(HoldThenShutdown)
    job = run_one(r, fetch, processor, Interrupted)
    release = releases[0]
    assert release is not None
    release()
    assert r.lrange(WORKING, 0, -1) == [job]


def test_outside_a_running_job_there_is_nothing_to_hold() -> None:
    assert kiq.ext.hold_acknowledgement() is None
