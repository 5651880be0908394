"""Iterable jobs in ``kiq worker``'s worker (in this process, or a process for the SIGKILLs): TERMed 5 times,
SIGKILLed twice with reliable fetch (5 times in ``make soak``), failing at item 5,000, cancelled from outside the
worker, and re-pushed by ``max_iteration_runtime``: every item runs, and what runs twice stays within one flush
window. Flush windows are bounded by item count, not timed: each item sleeps ``PAUSE``, so a window of ``FLUSH``
seconds holds at most FLUSH / PAUSE + 1 items however slow the machine is."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
import redis

import kiq
import kiq.ext
from kiq.iteration import state
from tests.jobs.iteration import HOOKS, QUEUE, SEEN, AsyncWalk, SlowItems, Walk, seen
from tests.support import FAST, FAST_RECOVERY, WorkerProcess, kill_counts, make_retries_due, wait_until
from tests.swarm_support import VictimSwarm

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.iteration", "-q", QUEUE, "-c", "2")
ITEMS = 10_000
PAUSE = 0.0005  # seconds each item sleeps at least
FLUSH = 0.05  # seconds between cursor saves (the default is 5)
WINDOW = int(FLUSH / PAUSE) + 1  # the most items one flush window can hold
ENV = {**FAST, "KIQ_ITERATION_FLUSH_INTERVAL": str(FLUSH), "KIQ_POLL_INTERVAL": "0.2"}


def progress(r: redis.Redis) -> int:
    return int(r.hlen(SEEN))


def finished(r: redis.Redis, jid: str) -> bool:
    return r.lrange(HOOKS, -1, -1) == ["complete"] and not r.exists(f"it-{jid}")


def nothing_failed(r: redis.Redis) -> None:
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert int(r.get("stat:failed") or 0) == 0


def test_term_five_times_mid_walk_every_item_once(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    jid = Walk.perform_async(ITEMS, PAUSE)
    assert jid is not None
    for stop in range(1, 6):
        worker = start_worker(*ARGS, env=ENV)
        wait_until(lambda stop=stop: progress(r) >= stop * 1500, 60, message=f"progress before TERM {stop}")
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0
        saved = state.read(r, jid)
        assert saved is not None and saved.executions == stop and saved.cursor == progress(r)
        [repushed] = [kiq.ext.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
        assert repushed["jid"] == jid and "retry_count" not in repushed and "error_message" not in repushed
    worker = start_worker(*ARGS, env=ENV)
    wait_until(lambda: finished(r, jid), 120, message="the walk's end")
    worker.stop()
    # a TERM interrupts between two items after saving the next one's cursor: nothing runs twice
    assert seen(e2e_config) == dict.fromkeys(range(ITEMS), 1)

    resumes = [hook for hook in r.lrange(HOOKS, 0, -1) if hook.startswith("resume:")]
    assert len(resumes) == 5
    nothing_failed(r)


@kill_counts(2, 5)
def test_sigkill_with_reliable_fetch_resumes_from_the_last_save(
    e2e_config: kiq.Config, start_worker_process: StartWorker, start_worker: StartWorker, kills: int
) -> None:
    """Each kill hits the child of one swarm of two that runs the walk (the other recovers it, or the one started
    in place of the killed one); the last worker, never killed, runs in this process."""
    r = e2e_config.redis
    env = {**ENV, **FAST_RECOVERY, "KIQ_FETCH": "reliable", "KIQ_RELIABLE_MAX_INTERRUPTS": "100"}
    jid = Walk.perform_async(ITEMS, PAUSE)
    assert jid is not None
    swarm = VictimSwarm(start_worker_process, r, 2, *ARGS, **env)
    redone = 0
    for kill in range(1, kills + 1):
        # the one job runs in one child: the busy one (it keeps the job until it is killed)
        swarm.kill(among=swarm.busy, until=lambda _, kill=kill: progress(r) >= kill * 1500)
        last_seen = progress(r) - 1  # items run in order: the highest one that began
        saved = state.read(r, jid)
        resume_at = 0 if saved is None else saved.cursor
        assert 0 <= last_seen + 1 - resume_at <= WINDOW, (last_seen, resume_at)
        redone += last_seen + 1 - resume_at
    assert swarm.stop() == 0, swarm.output()  # the walk is in the killed child's working list: no child runs it
    assert swarm.deaths() >= kills - 1, swarm.output()
    worker = start_worker(*ARGS, env=env)
    wait_until(lambda: finished(r, jid), 180, message="the walk's end")
    worker.stop()
    runs = seen(e2e_config)
    assert sorted(runs) == list(range(ITEMS))
    # exactly the items after each last save ran again, nothing else
    assert sum(runs.values()) - ITEMS == redone
    nothing_failed(r)


def test_an_error_at_item_5000_retries_from_there(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    jid = Walk.perform_async(ITEMS, 0, 5000)
    assert jid is not None
    worker = start_worker(*ARGS, env=ENV)
    wait_until(lambda: r.zcard("retry") == 1, 60, message="the failure's retry")
    saved = state.read(r, jid)
    assert saved is not None and saved.cursor == 5000 and saved.executions == 1
    [waiting] = make_retries_due(r)
    assert waiting["retry_count"] == 0 and waiting["error_message"] == "item 5000 fails once"
    wait_until(lambda: finished(r, jid), 60, message="the walk's end")
    worker.stop()
    assert seen(e2e_config) == {**dict.fromkeys(range(ITEMS), 1), 5000: 2}
    assert "resume:5000" in r.lrange(HOOKS, 0, -1)


def test_kiq_cancel_from_outside_the_worker_stops_it_within_one_flush(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    flush = 0.2
    jid = Walk.perform_async(1_000_000, PAUSE)
    assert jid is not None
    worker = start_worker(*ARGS, env={**ENV, "KIQ_ITERATION_FLUSH_INTERVAL": str(flush)})
    wait_until(lambda: progress(r) >= 500, 60, message="progress before the cancel")
    kiq.cancel(jid)  # the test's config and connection, not the worker's: the mark reaches it through Redis
    at_cancel = progress(r)
    wait_until(lambda: finished(r, jid), 60, message="the cancelled job's end")
    worker.stop()
    assert progress(r) - at_cancel <= int(flush / PAUSE) + 2
    assert r.lrange(HOOKS, -3, -1) == ["cancel", "stop", "complete"]
    assert r.llen(f"queue:{QUEUE}") == 0
    nothing_failed(r)


@pytest.mark.parametrize("limit", ["max_iteration_runtime", "timeout option"])
def test_a_runtime_limit_re_pushes_without_counting_a_retry(
    e2e_config: kiq.Config, start_worker: StartWorker, limit: str
) -> None:
    r = e2e_config.redis
    if limit == "timeout option":  # not kiq.JobTimeout mid-item, as for other jobs: the run's length
        jid = Walk.set(timeout=0.3).perform_async(2000, 0.001)
        env = ENV
    else:
        jid = Walk.perform_async(2000, 0.001)
        env = {**ENV, "KIQ_MAX_ITERATION_RUNTIME": "0.3"}
    assert jid is not None
    worker = start_worker(*ARGS, env=env)
    wait_until(lambda: finished(r, jid), 90, message="the walk's end")
    worker.stop()
    assert seen(e2e_config) == dict.fromkeys(range(2000), 1)
    resumes = [hook for hook in r.lrange(HOOKS, 0, -1) if hook.startswith("resume:")]
    assert len(resumes) >= 3  # 2 s of items in runs of 0.3 s
    nothing_failed(r)


@pytest.mark.parametrize("job_class", [SlowItems, AsyncWalk], ids=["thread", "event loop"])
def test_a_stop_does_not_wait_for_the_walk_and_logs_the_item_it_cut(
    e2e_config: kiq.Config, start_worker: StartWorker, job_class: type[kiq.IterableJob]
) -> None:
    r = e2e_config.redis
    jid = job_class.perform_async(5, 30.0)  # each item outlasts the stop timeout many times over
    assert jid is not None
    worker = start_worker(*ARGS, "-t", "1", env=ENV)
    wait_until(lambda: progress(r) >= 1, 60, message="the first item")
    worker.signal(signal.SIGTERM)
    # gone well before the item (30 s), let alone the walk, could end. Exit 1 is a stop that overran -t + 1.5 s:
    # in two full runs of the suite a starved machine kept Redis from answering the last heartbeat that long (the
    # thread dump showed both waiting on its reply); how fast a stop ends is test_worker.py's, not this test's.
    assert worker.wait(20) in (0, 1), worker.output()
    assert "in the middle of item 0 (cursor 0): it resumes from its last saved cursor" in worker.output()
    saved = state.read(r, jid)
    assert saved is not None and saved.cursor == 0
    [requeued] = [kiq.ext.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    assert requeued["jid"] == jid and "retry_count" not in requeued
    nothing_failed(r)


def test_an_async_walk_on_the_event_loop_is_interrupted_by_term_and_resumes(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    jid = AsyncWalk.perform_async(3000, 0.001)
    assert jid is not None
    worker = start_worker(*ARGS, env=ENV)
    wait_until(lambda: progress(r) >= 500, 60, message="progress before TERM")
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    saved = state.read(r, jid)
    assert saved is not None and saved.cursor == progress(r) < 3000
    worker = start_worker(*ARGS, env=ENV)
    wait_until(lambda: finished(r, jid), 90, message="the walk's end")
    worker.stop()
    assert seen(e2e_config) == dict.fromkeys(range(3000), 1)
    nothing_failed(r)
