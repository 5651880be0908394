"""``reliable_prefetch``: while the queues keep a backlog a fetch moves more jobs than there are idle threads (fewer
round trips in a drain); a short fetch ends it, and a quiet gives the prefetched jobs back, in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

import kiq
from kiq.fetcher import Capsule
from kiq.plugins.reliable_fetch import ReliableFetch
from kiq.server.fetch import fetcher_for
from tests.plugins.reliable_fetch.test_fetch import IDENTITY, WORKING, push, take


class CountingFetch(ReliableFetch):
    """Counts its round trips and what each asked for."""

    def __init__(self, capsule: Capsule) -> None:
        super().__init__(capsule)
        self.asked: list[int] = []

    def pop(self, wanted: int, block: float) -> list[tuple[str, str]]:
        self.asked.append(wanted)
        return super().pop(wanted, block)


@pytest.fixture
def prefetching(config: kiq.Config) -> Iterator[CountingFetch]:
    config.fetch = "reliable"  # brings the plugin and its settings
    config.reliable_prefetch = 40
    fetch = CountingFetch(Capsule("default", [("default", 0)], 2, config, IDENTITY))
    yield fetch
    fetch.close()


def test_a_drain_with_prefetch_takes_each_job_once_in_few_round_trips(
    prefetching: CountingFetch, r: redis.Redis
) -> None:
    jobs = push(r, "default", 400)
    taken: list[str] = []

    def work() -> None:
        while (unit := prefetching.retrieve_work()) is not None:
            taken.append(unit.job)
            unit.acknowledge()

    prefetching.block_seconds = 0.5
    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == sorted(jobs)  # each once
    prefetching.flush_acks()
    assert r.llen("queue:default") == 0 and r.llen(WORKING) == 0
    # two threads: 200 round trips without prefetch; with it, up to 2 + 40 jobs each once the backlog is seen
    assert max(prefetching.asked) >= 40
    assert len(prefetching.asked) < 40, prefetching.asked


def test_a_quiet_gives_the_prefetched_jobs_back_to_the_front_of_their_queue_in_order(
    prefetching: CountingFetch, r: redis.Redis
) -> None:
    jobs = push(r, "default", 100)
    running = [take(prefetching) for _ in range(4)]  # one thread, one job at a time: each fetch came back full
    assert [unit.job for unit in running] == jobs[:4]
    listed = r.llen(WORKING)
    assert listed > 4  # moved ahead of the threads, still listed: a crash now leaves them to recovery
    prefetching.quiet()
    assert r.lrange(WORKING, 0, -1) == [unit.job for unit in reversed(running)]  # only the started ones stay
    assert r.lrange("queue:default", -1, -1) == [jobs[4]]  # the oldest not started runs next, wherever
    assert r.llen("queue:default") == 96
    assert prefetching.take_unstarted() == []  # nothing left to hand out


def test_without_prefetch_a_fetch_never_moves_more_jobs_than_idle_threads(config: kiq.Config, r: redis.Redis) -> None:
    config.fetch = "reliable"
    push(r, "default", 50)
    fetch = fetcher_for(Capsule("default", [("default", 0)], 2, config, IDENTITY))
    assert isinstance(fetch, ReliableFetch) and fetch.prefetch == 0  # the default
    try:
        for _ in range(5):
            take(fetch)
            assert r.llen(WORKING) <= 5  # one thread asking: a job a fetch
    finally:
        fetch.close()
