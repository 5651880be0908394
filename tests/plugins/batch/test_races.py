"""The races a batch must survive, in this process on a real Redis: workers (each with its own config, plugin and
outcome writer, so their writes really race) finishing the last jobs at the same instant, a job that runs twice,
Redis refusing an outcome, a callback that fails, and an outcome found outside any running job."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import kiq
import tests.jobs.batch as jobs
from kiq.api import DeadSet
from kiq.fetcher import Capsule
from kiq.plugins.batch import Batch, BatchPlugin, status
from kiq.plugins.batch.scripts import Changes
from kiq.plugins.batch.writer import Outcome, _grouped
from kiq.server.fetch import BasicFetch
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.jobs.batch import FAILING_CALLBACK, AtTheBarrier, Callback, Counted, FailingCallback, Flaky, Noop
from tests.support import Unit, short_block, wait_until
from tests.tracking_support import retry_now

from .conftest import drain, events

CALLBACK = Callback.set(queue="callbacks")  # pushed where no worker of these tests fetches: counted as pushed


class Worker:
    """A worker of one thread in this process, with a config, a batch plugin and an outcome writer of its own."""

    def __init__(self, url: str, name: str) -> None:
        self.config = kiq.Config(redis_url=url)
        self.plugin = self.config.add_plugin(BatchPlugin)
        capsule = Capsule("default", [("default", 0)], 1, self.config, f"test:{name}:batch")
        self.stopping = threading.Event()
        fetcher = short_block(BasicFetch(capsule))
        self.processor = Processor(self.config, fetcher, self.stopping, RedisOutage(self.config), name)

    def stop(self) -> None:
        self.stopping.set()
        self.processor.thread.join(10)
        self.plugin.kiq_shutdown(self.config)
        self.config.redis.close()


StartWorkers = Callable[[int], list[Worker]]


@pytest.fixture
def start_workers(config: kiq.Config) -> Iterator[StartWorkers]:
    """Call ``start(n)`` for n running workers; all are stopped at the end."""
    started: list[Worker] = []

    def start(count: int) -> list[Worker]:
        assert config.redis_url is not None
        workers = [Worker(config.redis_url, f"worker-{len(started) + index}") for index in range(count)]
        for worker in workers:
            worker.processor.start()
        started.extend(workers)
        return workers

    yield start
    for worker in started:
        worker.stop()


def pushed_callbacks(r: redis.Redis) -> Counter[tuple[str, str]]:
    """How often each (bid, event) callback was pushed."""
    payloads = [json.loads(raw)["batch_callback"] for raw in r.lrange("queue:callbacks", 0, -1)]
    return Counter((fired["bid"], fired["event"]) for fired in payloads)


def processor(config: kiq.Config) -> Processor:
    fetcher = BasicFetch(Capsule("default", [("default", 0)], 1, config, "test:1:batch"))
    return Processor(config, fetcher, threading.Event(), RedisOutage(config), "test-processor")


def test_two_workers_finishing_the_last_two_jobs_at_the_same_instant_push_each_callback_once(
    config: kiq.Config, r: redis.Redis, start_workers: StartWorkers
) -> None:
    start_workers(2)
    bids = []
    for _ in range(30):
        jobs.barrier = threading.Barrier(2)  # each worker runs one job; both return at once
        with Batch(on_complete=CALLBACK, on_success=CALLBACK) as batch:
            AtTheBarrier.perform_bulk([[], []])
        bids.append(batch.bid)
        wait_until(lambda: r.llen("queue:callbacks") >= 2 * len(bids), message="this round's callbacks")
    assert pushed_callbacks(r) == Counter({(bid, event): 1 for bid in bids for event in ("complete", "success")})


def test_500_jobs_on_three_workers_push_each_callback_once_every_time(
    config: kiq.Config, r: redis.Redis, start_workers: StartWorkers
) -> None:
    rounds = 20
    workers = start_workers(3)
    bids = []
    for _ in range(rounds):  # pushed while the workers drain the batches before
        with Batch(on_complete=CALLBACK, on_success=CALLBACK) as batch:
            Noop.perform_bulk([[index] for index in range(500)])
        bids.append(batch.bid)
    wait_until(lambda: r.llen("queue:callbacks") >= 2 * rounds, 60, message="every batch's callbacks")
    for worker in workers:
        assert worker.plugin.flush(10)
    assert pushed_callbacks(r) == Counter({(bid, event): 1 for bid in bids for event in ("complete", "success")})
    assert all(b.total == 500 and b.success for b in map(status, bids) if b is not None)


def test_a_job_that_runs_twice_is_counted_once_and_its_success_stands(config: kiq.Config, r: redis.Redis) -> None:
    with Batch(on_complete=CALLBACK, on_success=CALLBACK) as batch:
        Flaky.perform_async()
    payload = r.rpop("queue:default")
    first, second = Unit(payload), Unit(payload)
    processor(config).process(first)
    processor(config).process(second)  # redelivered after it finished (a worker killed before its ack)
    r.set(jobs.FAIL, 1)
    third = Unit(payload)
    processor(config).process(third)  # and once more, failing this time: its success stands
    plugin = config.plugins.find(BatchPlugin)
    assert plugin is not None and plugin.flush(10)
    assert (first.acked, second.acked, third.acked) == (1, 1, 1)
    found = status(batch.bid)
    assert found is not None and (found.total, found.pending, found.failures, found.success) == (1, 0, 0, True)
    assert pushed_callbacks(r) == Counter({(batch.bid, "complete"): 1, (batch.bid, "success"): 1})


def test_successes_written_together_count_each_job_once_and_fire_each_event_once(
    config: kiq.Config, r: redis.Redis
) -> None:
    """The writer sends a batch's successes in a row as one change (one evaluation for all): the same counts and
    events as one change per job, a failure between them kept in its place, a success sent again changing nothing."""
    with Batch(on_complete=CALLBACK, on_success=CALLBACK) as first:
        ones = [Noop.perform_async() for _ in range(3)]
    with Batch(on_complete=CALLBACK) as second:
        twos = [Noop.perform_async() for _ in range(2)]
    outcomes = [Outcome("succeeded", first.bid, jid, lambda: None) for jid in ones[:2]]
    outcomes += [Outcome("failed", second.bid, twos[0], lambda: None)]
    outcomes += [Outcome("succeeded", second.bid, twos[1], lambda: None)]
    outcomes += [Outcome("succeeded", first.bid, ones[2], lambda: None)] * 2  # the last one twice
    changes = _grouped(outcomes)
    assert [(op, bid, len(grouped)) for op, bid, grouped in changes] == [
        ("succeeded", first.bid, 2), ("failed", second.bid, 1), ("succeeded", second.bid, 1),
        ("succeeded", first.bid, 2),
    ]  # fmt: skip
    plugin = config.plugins.find(BatchPlugin)
    assert plugin is not None
    script = Changes(config)
    replies = script.run_many([script.argv(op, bid, *(o.jid for o in grouped)) for op, bid, grouped in changes])
    assert replies == ["ok"] * 4
    one, two = status(first.bid), status(second.bid)
    assert one is not None and (one.total, one.pending, one.failures, one.success) == (3, 0, 0, True)
    assert two is not None and (two.total, two.pending, two.failures, two.success) == (2, 1, 1, False)
    assert pushed_callbacks(r) == Counter(
        {(first.bid, "complete"): 1, (first.bid, "success"): 1, (second.bid, "complete"): 1}
    )


def test_an_outcome_redis_refuses_keeps_its_job_unacknowledged_until_it_is_written(
    config: kiq.Config, r: redis.Redis
) -> None:
    with Batch(on_complete=CALLBACK, on_success=CALLBACK) as batch:
        Counted.perform_async()
    r.set(f"kiq:batch:{batch.bid}:failed", "not a set")  # every outcome of this batch now fails (WRONGTYPE)
    unit = Unit(r.rpop("queue:default"))
    processor(config).process(unit)
    plugin = config.plugins.find(BatchPlugin)
    assert plugin is not None
    assert not plugin.flush(1.0)  # retried, not given up
    assert unit.acked == 0 and len(r.hgetall(jobs.RUNS)) == 1
    assert r.llen("queue:callbacks") == 0
    r.delete(f"kiq:batch:{batch.bid}:failed")
    assert plugin.flush(10)
    assert unit.acked == 1
    found = status(batch.bid)
    assert found is not None and found.success
    assert pushed_callbacks(r) == Counter({(batch.bid, "complete"): 1, (batch.bid, "success"): 1})


def test_a_callback_that_fails_is_retried_and_the_batch_stays_complete(config: kiq.Config, r: redis.Redis) -> None:
    r.set(FAILING_CALLBACK, 1)
    with Batch(on_success=FailingCallback) as batch:
        Noop.perform_async()
    drain(config)
    assert r.zcard("retry") == 1 and events(r, batch.bid) == {}
    found = status(batch.bid)
    assert found is not None and found.success
    r.delete(FAILING_CALLBACK)
    retry_now(config)
    drain(config)
    assert events(r, batch.bid) == {"success": 1}
    assert r.hget(jobs.FIRED, "attempt:success") == "2"
    again = status(batch.bid)
    assert again is not None and again.success and again.success_at == found.success_at


def test_a_death_found_outside_a_running_job_is_written_at_once(config: kiq.Config, r: redis.Redis) -> None:
    with Batch(on_complete=CALLBACK, on_death=CALLBACK) as batch:
        Noop.set(queue="nowhere").perform_async()
    DeadSet(config).kill(r.rpop("queue:nowhere"))  # an operator kills it (no job is running here)
    found = status(batch.bid)
    assert found is not None and (found.dead, found.failures) == (1, 1) and found.complete
    assert pushed_callbacks(r) == Counter({(batch.bid, "death"): 1, (batch.bid, "complete"): 1})
