"""Queue pause with real workers: every fetcher (basic and reliable, sync and async jobs) stops taking from a paused
queue within a second while pushes go on, takes from it again within a second of the unpause, and loses nothing;
with reliable fetch not even when workers are killed (SIGKILL) around the pause."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

import kiq
from tests.jobs.pause import DONE, STARTS, AsyncStamp, Stamp
from tests.support import FAST, FAST_RECOVERY, WorkerProcess, identity_of, wait_until
from tests.swarm_support import VictimSwarm

StartWorker = Callable[..., WorkerProcess]

BOUND = 1.0  # seconds: the promise (docs/guide/operations.md, "Queue pause")
WATCH = 2.5  # seconds the paused queue is watched past the bound: no job of it may start in that time
FEED_EVERY = 0.05  # seconds between two pushes to each queue while the test watches


def starts(r: redis.Redis, queue: str) -> list[float]:
    """When each job of ``queue`` started, in the order they started."""
    return [at for name, _, at in map(json.loads, r.lrange(STARTS, 0, -1)) if name == queue]


@contextmanager
def feeding(job: type[kiq.Job], queues: tuple[str, ...]) -> Iterator[list[str]]:
    """Push a short job to each of ``queues`` every FEED_EVERY s meanwhile; yields the jids pushed so far."""
    jids: list[str] = []
    done = threading.Event()

    def feed() -> None:
        while not done.wait(FEED_EVERY):
            jids.extend(job.set(queue=queue).perform_async(5) for queue in queues)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield jids
    finally:
        done.set()
        feeder.join()


@pytest.mark.parametrize(
    ("fetch", "job"),
    [("basic", Stamp), ("reliable", Stamp), ("basic", AsyncStamp), ("reliable", AsyncStamp)],
    ids=["basic-sync", "reliable-sync", "basic-async", "reliable-async"],
)
def test_a_paused_queue_is_left_alone_within_a_second_and_taken_again_within_a_second(
    e2e_config: kiq.Config, start_worker: StartWorker, fetch: str, job: type[kiq.Job]
) -> None:
    r = e2e_config.redis
    queue = kiq.Queue("paused", e2e_config)
    worker = start_worker("-r", "tests.jobs.pause", "-q", "paused", "-q", "other", "-c", "3", "--fetch", fetch,
                          env=FAST)  # fmt: skip
    identity_of(r, worker)
    with feeding(job, ("paused", "other")) as jids:
        wait_until(lambda: starts(r, "paused"), 30, message="the worker to take jobs from the queue")

        paused_at = time.time()
        assert queue.pause() is True and queue.paused
        assert queue.pause() is False  # already paused
        time.sleep(BOUND + WATCH)  # the window watched: no job of the paused queue may start in it
        late = [at - paused_at for at in starts(r, "paused") if at > paused_at + BOUND]
        assert not late, f"jobs of the paused queue started {late} s after the pause"
        assert queue.size > 0  # the pushes went on
        assert [at for at in starts(r, "other") if at > paused_at + BOUND]  # the other queue was served on

        unpaused_at = time.time()
        assert queue.unpause() is True and not queue.paused
        first = wait_until(lambda: [at for at in starts(r, "paused") if at > unpaused_at], 30)[0]
        assert first - unpaused_at <= BOUND, f"the first job ran {first - unpaused_at:.2f} s after the unpause"
    wait_until(lambda: r.scard(DONE) >= len(jids), 60, message="every job pushed to run")
    assert set(r.smembers(DONE)) == set(jids)
    assert worker.stop() == 0, worker.output()


def test_reliable_fetch_loses_nothing_when_workers_are_killed_around_a_pause(
    e2e_config: kiq.Config, start_worker_process: StartWorker, start_worker: StartWorker
) -> None:
    """A worker killed while the queue is paused leaves its jobs to recovery, which puts them back in the paused
    queue, where they wait (no worker takes them); after the unpause they run, even with another kill then. The
    workers killed are the children of one swarm of one (a memory limit no child reaches makes ``-p 1`` a swarm):
    the first, then the one its parent starts in its place; the last worker, never killed, runs in this process."""
    r = e2e_config.redis
    queue = kiq.Queue("paused", e2e_config)
    args = ("-r", "tests.jobs.pause", "-q", "paused", "-c", "4", "--fetch", "reliable")
    jids = [Stamp.set(queue="paused").perform_async(1500) for _ in range(40)]
    swarm = VictimSwarm(start_worker_process, r, 1, *args, **FAST_RECOVERY)
    [first] = swarm.ready().values()
    wait_until(lambda: int(r.hget(first["identity"], "busy") or 0) == 4, 30, message="the first worker busy")

    queue.pause()
    more = [Stamp.set(queue="paused").perform_async(50) for _ in range(20)]  # pushes go on while paused
    assert swarm.kill()["pid"] == first["pid"]  # SIGKILL: 4 jobs in its working list; the parent starts a second child
    # recovery puts the killed worker's 4 jobs back into the paused queue, where they wait
    identity = first["identity"]
    wait_until(lambda: not list(r.scan_iter(match=f"kiq:working:{identity}:*")), 30, message="recovery")
    wait_until(lambda: queue.size == len(jids) + len(more), 30, message="every job back in the queue")
    [second] = swarm.ready().values()
    assert second["pid"] != first["pid"]
    time.sleep(BOUND + 1.0)  # long enough for the second worker to have taken a job if it were to
    assert queue.size == len(jids) + len(more) and r.scard(DONE) == 0

    queue.unpause()
    wait_until(lambda: int(r.hget(second["identity"], "busy") or 0) > 0, 30, message="the second worker busy")
    assert swarm.kill()["pid"] == second["pid"]  # SIGKILL again, with jobs in flight after the unpause
    assert swarm.stop() == 0, swarm.output()  # stopped before its parent starts a third child
    assert swarm.deaths() >= 1, swarm.output()
    third = start_worker(*args, "-c", "20", env=FAST_RECOVERY)
    wait_until(lambda: r.scard(DONE) == len(jids) + len(more), 120, message="every job done")
    assert set(r.smembers(DONE)) == set(jids + more)
    assert third.stop() == 0, third.output()
