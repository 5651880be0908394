"""BasicFetch: one round trip for the idle threads over the capsule's queues in Sidekiq's strict / random /
weighted orders, BRPOP when they are empty; requeue to the end fetches take from; and the ``fetch`` setting
choosing the fetcher."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.errors import ConfigError
from kiq.fetcher import TIMEOUT, Capsule, QueueOrder
from kiq.server.fetch import BasicFetch, BasicUnitOfWork, fetcher_for
from tests.cluster_support import TIMER_STEP
from tests.support import TEST_BLOCK, short_block, wait_until

# the block time of a test whose threads must go on waiting for a while (half the production 2 s): to push a job
# while they wait, or to count wake-ups before any sleeper's deadline passes
LONG_BLOCK = 1.0


def capsule(config: kiq.Config, *queues: tuple[str, int]) -> Capsule:
    return Capsule("default", list(queues), 1, config, "test:1:abc")


def first_keys(fetch: BasicFetch, times: int = 4000) -> Counter[str]:
    return Counter(fetch.order.keys()[0] for _ in range(times))


@pytest.mark.cluster
def test_strict_order_fetches_from_the_first_queue_first(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    r.lpush(keys.queue("low"), "low-1")
    r.lpush(keys.queue("high"), "high-1", "high-2")
    fetch = BasicFetch(capsule(config, ("high", 0), ("low", 0)))
    assert fetch.order.keys() == [keys.queue("high"), keys.queue("low")]
    fetched = [fetch.retrieve_work() for _ in range(3)]
    assert [(u.queue_name, u.job) for u in fetched if u] == [("high", "high-1"), ("high", "high-2"), ("low", "low-1")]


def test_strict_order_lists_a_repeated_queue_once(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 0), ("b", 0), ("a", 0)))
    assert fetch.order.keys() == ["queue:a", "queue:b"]


def test_weighted_order_puts_a_queue_first_in_proportion_to_its_weight(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("high", 3), ("low", 1)))
    counts = first_keys(fetch)
    assert 0.70 < counts["queue:high"] / 4000 < 0.80  # 3 of 4 expected; ~0.7% standard deviation
    assert sorted(fetch.order.keys()) == ["queue:high", "queue:low"]  # every queue, each once


def test_weighted_mode_counts_a_queue_without_weight_once(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 2), ("b", 0)))
    assert capsule(config, ("a", 2), ("b", 0)).mode == "weighted"
    assert 0.60 < first_keys(fetch)["queue:a"] / 4000 < 0.73  # 2 of 3


def test_random_order_when_all_weights_are_one(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 1), ("b", 1)))
    assert fetch.capsule.mode == "random"
    assert 0.44 < first_keys(fetch)["queue:a"] / 4000 < 0.56


@pytest.mark.cluster
def test_retrieve_work_returns_none_when_the_queues_stay_empty(config: kiq.Config) -> None:
    assert BasicFetch(capsule(config, ("empty", 0))).block_seconds == TIMEOUT  # production waits up to 2 s
    fetch = short_block(BasicFetch(capsule(config, ("empty", 0))))
    started = time.monotonic()
    assert fetch.retrieve_work() is None
    assert time.monotonic() - started >= TEST_BLOCK - 0.05  # it did wait (BRPOP), then gave up at its deadline


def test_block_seconds_is_set_per_instance(config: kiq.Config) -> None:
    class Shorter(kiq.ext.BatchFetch):
        pass

    assert Shorter(config.redis, block_seconds=0.3).block_seconds == 0.3
    assert Shorter(config.redis).block_seconds == kiq.ext.BatchFetch.block_seconds == TIMEOUT  # the class default stays


def take_concurrently(fetch: BasicFetch, threads: int) -> list[BasicUnitOfWork | None]:
    results: list[BasicUnitOfWork | None] = []
    lock = threading.Lock()

    def take() -> None:
        unit = fetch.retrieve_work()
        with lock:
            results.append(unit)

    workers = [threading.Thread(target=take) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    return results


class CountingFetch(BasicFetch):
    """Counts round trips (the fetches leaders make for the waiting threads; two may fetch at once), what each asked
    for and the jobs they brought. ``delay`` slows each round trip, so that the other threads are waiting when the
    next one starts."""

    def __init__(self, capsule: Capsule, delay: float = 0.0) -> None:
        super().__init__(capsule)
        self.delay = delay
        self.round_trips = 0
        self.jobs = 0
        self.wanted: list[int] = []
        self.counting = threading.Lock()

    def pop(self, wanted: int, block: float) -> list[tuple[str, str]]:
        time.sleep(self.delay)
        jobs = super().pop(wanted, block)
        with self.counting:
            self.round_trips += 1
            self.wanted.append(wanted)
            self.jobs += len(jobs)
        return jobs


@pytest.mark.cluster
def test_one_round_trip_serves_every_waiting_thread_and_takes_no_more(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    r.lpush(keys.queue("default"), *[f"job-{i}" for i in range(20)])
    fetch = CountingFetch(capsule(config, ("default", 0)), delay=0.05)
    units = take_concurrently(fetch, 6)
    jobs = sorted(unit.job for unit in units if unit is not None)
    assert len(jobs) == 6 and len(set(jobs)) == 6  # every thread got its own job
    assert r.llen(keys.queue("default")) == 14  # nothing taken that no thread was ready to run
    assert fetch.round_trips < 6  # the first one serves its leader; the next, the threads that queued behind it
    assert max(fetch.wanted) > 1


def test_a_batch_over_several_queues_keeps_the_strict_order(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:high", "high-1", "high-2")
    r.lpush("queue:low", "low-1", "low-2", "low-3")
    fetch = BasicFetch(capsule(config, ("high", 0), ("low", 0)))
    assert fetch.pop(4, block=0) == [("high", "high-1"), ("high", "high-2"), ("low", "low-1"), ("low", "low-2")]
    assert r.lrange("queue:low", 0, -1) == ["low-3"]


@pytest.mark.cluster
def test_waiting_threads_get_none_when_the_queues_stay_empty(config: kiq.Config, keys: kiq.ext.Keyspace) -> None:
    fetch = short_block(BasicFetch(capsule(config, ("empty", 0))), 0.3)
    started = time.monotonic()
    assert take_concurrently(fetch, 4) == [None] * 4
    # each within about its block time (one may wait for the blocked leader): 3 of them, as 6 s were for 2 s; and a
    # pool cluster's blocking pop ends at its next timer run
    assert time.monotonic() - started < 3 * fetch.block_seconds + (TIMER_STEP if keys.cluster else 0)


def waiting(fetch: BasicFetch, threads: int) -> bool:
    """All ``threads`` wait: one or two lead a fetch (a blocking pop each), the others sleep on their mailboxes."""
    with fetch._lock:
        return fetch._leading > 0 and len(fetch._sleepers) == threads - fetch._leading


@pytest.mark.cluster
def test_a_job_pushed_while_threads_wait_is_fetched_by_one_of_them(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    # on a cluster the pop blocks on the first queue's slot for MAX_BLOCK, and a pool cluster ends it at its next
    # timer run: the threads wait long enough for the pop on every slot that follows
    block = LONG_BLOCK + (TIMER_STEP if keys.cluster else 0)
    fetch = short_block(BasicFetch(capsule(config, ("default", 0), ("other", 0))), block)
    results: list[BasicUnitOfWork | None] = []
    waiter = threading.Thread(target=lambda: results.extend(take_concurrently(fetch, 3)))
    waiter.start()
    wait_until(lambda: waiting(fetch, 3), 5, message="the threads to wait")
    r.lpush(keys.queue("other"), "late")
    waiter.join(10)
    assert [(unit.queue_name, unit.job) for unit in results if unit is not None] == [("other", "late")]


def test_a_failing_fetch_reaches_the_caller_and_the_next_fetch_works(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", "job")
    fetch = BasicFetch(capsule(config, ("default", 0)))
    r.set("queue:broken", "not a list")
    fetch.order = QueueOrder([("broken", 0)], "strict")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        fetch.retrieve_work()
    fetch.order = QueueOrder([("default", 0)], "strict")
    unit = fetch.retrieve_work()  # the lead was given up: this thread fetches again
    assert unit is not None and unit.job == "job"


@pytest.mark.cluster
def test_bulk_requeue_puts_jobs_back_where_they_are_fetched_next(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    r.lpush(keys.queue("default"), "older")
    fetch = BasicFetch(capsule(config, ("default", 0), ("other", 0)))
    units: list[Any] = [BasicUnitOfWork("default", "a", fetch), BasicUnitOfWork("other", "b", fetch)]
    fetch.bulk_requeue(units)
    assert r.lrange(keys.queue("other"), 0, -1) == ["b"]
    unit = fetch.retrieve_work()
    assert unit is not None and unit.job == "a"  # before "older", which waited in the queue


@pytest.mark.cluster
def test_requeue_of_one_unit(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    r.lpush(keys.queue("default"), "job")
    unit = BasicFetch(capsule(config, ("default", 0))).retrieve_work()
    assert unit is not None and r.llen(keys.queue("default")) == 0
    unit.acknowledge()  # nothing to do for BRPOP
    unit.requeue()
    assert r.lrange(keys.queue("default"), 0, -1) == ["job"]


def test_a_capsule_needs_queues(config: kiq.Config) -> None:
    with pytest.raises(ConfigError, match="no queues"):
        BasicFetch(capsule(config))


# -- choosing the fetcher ---------------------------------------------------------------------------------
class ListFetch:
    def __init__(self, capsule: Capsule) -> None:
        self.capsule = capsule

    def retrieve_work(self) -> None:
        return None

    def bulk_requeue(self, units: list[Any]) -> None:
        pass

    def heartbeat(self) -> None:
        pass

    def quiet(self) -> None:
        pass

    def close(self) -> None:
        pass


class FetchPlugin:
    @kiq.hookimpl
    def kiq_fetcher(self, name: str, config: kiq.Config, capsule: Capsule) -> ListFetch | None:
        return ListFetch(capsule) if name == "mine" else None


def test_fetcher_for_basic(config: kiq.Config) -> None:
    assert type(fetcher_for(capsule(config, ("default", 0)))) is BasicFetch


def test_fetcher_for_module_and_class(config: kiq.Config) -> None:
    config.fetch = "tests.server.test_fetch:ListFetch"
    fetcher = fetcher_for(capsule(config, ("default", 0)))
    assert type(fetcher).__name__ == "ListFetch"


def test_fetcher_for_asks_the_plugins(config: kiq.Config) -> None:
    config.add_plugin(FetchPlugin())
    config.fetch = "mine"
    cap = capsule(config, ("default", 0))
    fetcher = fetcher_for(cap)
    assert isinstance(fetcher, ListFetch) and fetcher.capsule is cap


def test_fetch_reliable_brings_the_plugin_that_provides_it(config: kiq.Config) -> None:
    from kiq.plugins.reliable_fetch import ReliableFetch, ReliableFetchPlugin

    config.fetch = "reliable"  # found through the kiq.fetchers entry points: core names no plugin
    assert config.plugins.find(ReliableFetchPlugin) is not None
    fetcher = fetcher_for(capsule(config, ("default", 0)))
    assert isinstance(fetcher, ReliableFetch)
    fetcher.close()


def test_fetcher_for_unknown_names(config: kiq.Config) -> None:
    config.fetch = "nosuch"
    with pytest.raises(ConfigError, match="unknown fetch strategy 'nosuch'"):
        fetcher_for(capsule(config, ("default", 0)))
    config.fetch = "tests.server.test_fetch:Missing"
    with pytest.raises(ConfigError, match="cannot be loaded"):
        fetcher_for(capsule(config, ("default", 0)))


class WakeCountingFetch(BasicFetch):
    """Counts the sleeping threads woken to take a job already fetched."""

    def __init__(self, capsule: Capsule) -> None:
        super().__init__(capsule)
        self.wakes = 0

    def _wake(self, sleeper: Any) -> None:
        self.wakes += 1
        super()._wake(sleeper)


def test_threads_already_awake_take_fetched_jobs_so_few_sleepers_are_woken(config: kiq.Config, r: redis.Redis) -> None:
    jobs = 600
    r.lpush("queue:default", *[f"job-{i}" for i in range(jobs)])
    # the threads end by waiting out the block time once the queue is empty; the jobs take well under it, so no
    # sleeper's deadline passes (and counts wake-ups) while they run
    fetch = short_block(WakeCountingFetch(capsule(config, ("default", 0))), LONG_BLOCK)
    taken: list[str] = []

    def work() -> None:
        while (unit := fetch.retrieve_work()) is not None:
            taken.append(unit.job)  # a no-op job: done at once, so this thread asks again right away

    threads = [threading.Thread(target=work) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == sorted(f"job-{i}" for i in range(jobs))  # each once, none left behind
    assert r.llen("queue:default") == 0 and not fetch._ready
    assert fetch.wakes < jobs / 3  # a job per wake-up would be 600


@pytest.mark.cluster
def test_jobs_fetched_for_sleeping_threads_reach_them_at_once(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    fetch = BasicFetch(capsule(config, ("default", 0)))
    results: list[BasicUnitOfWork | None] = []
    waiter = threading.Thread(target=lambda: results.extend(take_concurrently(fetch, 4)))
    waiter.start()
    wait_until(lambda: waiting(fetch, 4), 5, message="the threads to wait")  # a leader and three sleepers
    r.lpush(keys.queue("default"), *[f"job-{i}" for i in range(4)])
    pushed = time.monotonic()
    waiter.join(10)
    assert time.monotonic() - pushed < 1.2  # not at the sleepers' 2 s deadlines (the production block time)
    assert sorted(unit.job for unit in results if unit is not None) == [f"job-{i}" for i in range(4)]
    assert not fetch._ready


class ListedFetch(kiq.ext.BatchFetch):
    """The hand-off engine over a list of jobs (no Redis: what is tested here is who gets which job, when)."""

    def __init__(self, redis: redis.Redis, jobs: list[str], block_seconds: float) -> None:
        super().__init__(redis, block_seconds)  # the connection is never used
        self.jobs = jobs

    def pop(self, wanted: int, block: float) -> list[tuple[str, str]]:
        taken, self.jobs[:wanted] = self.jobs[:wanted], []
        return [("default", job) for job in taken]


def test_a_sleeper_whose_job_an_awake_thread_took_fetches_instead_of_waiting_out_its_time(config: kiq.Config) -> None:
    """A fetch brought one job per idle thread, but a thread that was awake took the last one first: the sleeper it
    was meant for must not sleep until its deadline while jobs wait in the queue (it fetches)."""
    fetch = ListedFetch(config.redis, ["for-the-sleeper"], block_seconds=5)
    with fetch._lock:
        fetch._leading = 1  # a fetch under way: a thread asking now sleeps until it ends
    got: list[tuple[str, str] | None] = []
    sleeper = threading.Thread(target=lambda: got.append(fetch.next_job()))
    sleeper.start()
    wait_until(lambda: fetch._sleepers, 5, message="the thread to sleep")
    with fetch._lock:  # the fetch ends with one ready job for the sleeper, whose wake-up is left to the next taker
        fetch._leading = 0
        fetch._ready.append(("default", "fetched-for-it"))
    started = time.monotonic()
    assert fetch.next_job() == ("default", "fetched-for-it")  # a thread already awake takes it first
    sleeper.join(3)
    assert got == [("default", "for-the-sleeper")]  # it fetched the job still in the queue
    assert time.monotonic() - started < 1  # at once, not at its deadline (5 s)


class SlowFetch(BasicFetch):
    """A round trip slower than the waiting threads' time (as a cluster client's, retrying a primary that died)."""

    def pop(self, wanted: int, block: float) -> list[tuple[str, str]]:
        time.sleep(0.4)
        return super().pop(wanted, block)


def test_threads_whose_wait_ends_while_the_fetch_fails_get_that_failure_not_none(
    config: kiq.Config, r: redis.Redis
) -> None:
    """None says "Redis had no job": a worker takes it for a Redis that works, the end of an outage it logged
    (kiq.server.outcomes.RedisOutage). The threads that waited on a fetch that failed get its failure, or an outage
    would be logged over and over while it lasts, each time a waiting thread returned empty-handed."""
    r.set("queue:broken", "not a list")
    fetch = short_block(SlowFetch(capsule(config, ("broken", 0))), 0.2)

    def outcomes() -> list[object]:
        got: list[object] = []

        def take() -> None:
            try:
                got.append(fetch.retrieve_work())
            except redis.ResponseError as exc:
                got.append(exc)

        threads = [threading.Thread(target=take) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        return got

    failed = outcomes()
    assert len(failed) == 4 and all("WRONGTYPE" in str(outcome) for outcome in failed), failed
    assert len({id(outcome) for outcome in failed}) == 4  # each thread raises its own (a copy)
    r.delete("queue:broken")
    assert outcomes() == [None] * 4  # Redis answers again: no job is None again


class OneJobPerFetch(kiq.ext.BatchFetch):
    """A light load with no Redis: each fetch waits a little for its one job, as a blocking pop does."""

    def __init__(self, redis: redis.Redis, jobs: int, block_seconds: float) -> None:
        super().__init__(redis, block_seconds)  # the connection is never used
        self.left = jobs

    def pop(self, wanted: int, block: float) -> list[tuple[str, str]]:
        time.sleep(0.002)
        if self.left <= 0:
            return []
        self.left -= 1
        return [("default", f"job-{self.left}")]


class Takers:
    """``count`` threads, each taking jobs with ``take`` (None: no job came) until ``stop``, and the voluntary context
    switches of the lot so far (Linux's /proc): a thread stays alive until stopped, so its count can be read."""

    def __init__(self, take: Callable[[], str | None], count: int = 10) -> None:
        self.taken: list[str] = []
        self._take = take
        self._ids: list[int] = []
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._work) for _ in range(count)]
        for thread in self._threads:
            thread.start()
        wait_until(lambda: len(self._ids) == count, 5, message="the threads to start")

    def _work(self) -> None:
        self._ids.append(threading.get_native_id())
        while not self._stopping.is_set():
            job = self._take()
            if job is not None:
                self.taken.append(job)

    def switches(self) -> int:
        total = 0
        for tid in self._ids:
            with open(f"/proc/self/task/{tid}/status") as status:
                total += sum(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))
        return total

    def stop(self, fetch: kiq.ext.BatchFetch) -> None:
        self._stopping.set()
        fetch.close()
        for thread in self._threads:
            thread.join(5)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts context switches in /proc (Linux)")
def test_at_light_load_a_sleeper_whose_time_is_up_is_not_woken_at_every_job(config: kiq.Config) -> None:
    """One job per fetch, ten threads: the leader's job goes to it and the lead to one sleeper; the sleepers whose
    time is up are answered once (they return None and ask again), not woken by every later leader, which cost
    eight wake-ups a job in a worker at 1,000 jobs/s."""
    jobs = 400
    fetch = OneJobPerFetch(config.redis, jobs, block_seconds=0.05)  # many deadlines pass during the run
    takers = Takers(lambda: fetched[1] if (fetched := fetch.next_job()) else None)
    before = takers.switches()
    wait_until(lambda: len(takers.taken) == jobs, 30, interval=0.005, message="every job taken")
    per_job = (takers.switches() - before) / jobs
    takers.stop(fetch)
    assert sorted(takers.taken) == sorted(f"job-{i}" for i in range(jobs))
    assert per_job < 6, f"{per_job:.1f} context switches per job"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts context switches in /proc (Linux)")
def test_at_light_load_the_thread_a_job_wakes_runs_it_while_a_second_pop_waits(
    config: kiq.Config, r: redis.Redis
) -> None:
    """Basic fetch parks two blocking pops, each on its own connection: a job pushed to an idle worker wakes the
    thread whose pop took it, and that thread runs it while the other pop waits on, so no thread has to be woken to
    take over the waiting (one switch a job, as Sidekiq's pop per thread; about 2.6 when the lead passed on)."""
    if int(r.info("server")["redis_version"].split(".")[0]) < 7:
        pytest.skip("before Redis 7 (no BLMPOP) a fetch pops once before it blocks: one more round trip a job")
    fetch = short_block(BasicFetch(capsule(config, ("default", 0))), LONG_BLOCK)
    assert fetch.leaders == 2
    jobs = 150
    takers = Takers(lambda: unit.job if (unit := fetch.retrieve_work()) else None)
    wait_until(lambda: waiting(fetch, 10) and fetch._leading == 2, 5, message="two pops parked")
    before = takers.switches()
    for number in range(jobs):
        r.lpush("queue:default", f"job-{number}")
        wait_until(lambda: len(takers.taken) > number, 5, message="the job taken")  # noqa: B023 (called at once)
        time.sleep(0.002)
    per_job = (takers.switches() - before) / jobs
    takers.stop(fetch)
    assert sorted(takers.taken) == sorted(f"job-{i}" for i in range(jobs))
    assert per_job < 1.8, f"{per_job:.2f} context switches per job"


def test_under_a_backlog_one_leader_fetches_a_batch_for_every_idle_thread(config: kiq.Config, r: redis.Redis) -> None:
    """The second parked pop is for light load: under a backlog a thread that finishes waits for the next fetch,
    which brings a job for each idle thread, rather than fetching for itself (a drain took twice the round trips,
    and ran at 0.57x, when threads that finished became second leaders)."""
    jobs = 2000
    r.lpush("queue:default", *[f"job-{number}" for number in range(jobs)])
    fetch = short_block(CountingFetch(capsule(config, ("default", 0))), 0.3)
    taken: list[str] = []
    start = threading.Barrier(10)  # every thread asks from the start, not as the main thread gets to start it
    end = time.monotonic() + 30

    def work() -> None:
        # as a processor does: a wait that ends without a job is followed by the next (on CI, starved threads
        # whose 0.3-s wait ran out ended here, and the few left fetched 4.2 jobs a round trip)
        start.wait()
        while len(taken) < jobs and time.monotonic() < end:
            if (unit := fetch.retrieve_work()) is not None:
                taken.append(unit.job)

    threads = [threading.Thread(target=work) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(31)
    assert sorted(taken) == sorted(f"job-{number}" for number in range(jobs))
    batch = fetch.jobs / fetch.round_trips
    assert batch >= 6, f"{batch:.1f} jobs a round trip"
