"""Chaos: real ``kiq worker`` processes SIGKILLed while they run jobs. With the reliable fetcher no job is lost
(some run twice, counted and printed); with the basic fetcher the same chaos loses jobs, so the test can tell.
A poison pill that kills its worker ends in the dead set after the cap while other jobs keep flowing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
from kiq.payload import loads
from kiq.plugins.reliable_fetch.keys import alive_key
from tests.jobs.reliable import (
    DEATHS,
    DONE,
    INTERRUPTED,
    RUNS,
    RUNS_BY_JID,
    KillsItsWorker,
    Tick,
    TrackedWork,
    expected_status,
)
from tests.support import WorkerProcess, kill_counts, wait_until
from tests.swarm_support import VictimSwarm, forked
from tests.tracking_support import track

StartWorker = Callable[..., WorkerProcess]

WORKERS = 3
KILL_EVERY = 1.5  # seconds between SIGKILLs (pacing the chaos, not timing anything asserted)
FAST = {"KIQ_HEARTBEAT_INTERVAL": "1"}
RELIABLE = {
    **FAST,
    "KIQ_PLUGINS": "reliable_fetch",  # so the reliable_* settings below are known when the env is read
    "KIQ_RELIABLE_RECOVERY_INTERVAL": "1",
}

pytestmark = pytest.mark.slow


def keys(r: redis.Redis, pattern: str) -> list[str]:
    return list(r.scan_iter(match=pattern, count=1000))


def orphans(r: redis.Redis) -> list[str]:
    """Working lists whose process is gone (not yet recovered)."""
    return [key for key in keys(r, "kiq:working:*") if not r.exists("kiq:alive:" + key[12:].rpartition(":")[0])]


def run_with_kills(
    r: redis.Redis,
    start_worker: StartWorker,
    fetch: str,
    env: dict[str, str],
    kills: int,
    every: float = KILL_EVERY,
    concurrency: int = 4,
) -> VictimSwarm:
    """Start a swarm of WORKERS workers and SIGKILL a random child every ``every`` s (its parent starts a new one in
    its place, as a supervisor would); returns the swarm."""
    args = ("-r", "tests.jobs.reliable", "-q", "default", "-c", str(concurrency), "--fetch", fetch)
    swarm = VictimSwarm(start_worker, r, WORKERS, *args, **env)
    victims = []
    for _ in range(kills):
        time.sleep(every)

        # a victim still starting (slow under load) would have no job to lose; near the end, no job may be left
        def busy_or_drained(info: dict[str, Any]) -> bool:
            return swarm.busy(info) or not r.exists("queue:default")

        victims.append(swarm.kill(until=busy_or_drained))
    # until the victims' liveness keys expire (3 heartbeats), their working lists are not orphans yet: a test that
    # saw every job done in that window and stopped the workers would leave those lists with nobody to recover
    wait_until(
        lambda: not any(r.exists(alive_key(victim["identity"])) for victim in victims),
        10,
        message="the victims' liveness to expire",
    )
    return swarm


def stop_all(swarm: VictimSwarm) -> None:
    """TERM the swarm once each child it has is registered, so past its start (a child still starting dies of TERM,
    -15); one the parent would start later is not waited for (a stopping parent starts none)."""

    def registered() -> set[int]:
        pids = {info["pid"] for info in swarm.children().values()}
        return pids if set(forked(swarm.process.pid)) <= pids else set()

    running = wait_until(registered, 30, message="the swarm's children to be registered")
    assert swarm.stop(40) == 0, swarm.output()
    # the parent exits with 0 whatever its children did: each child's exit status is in the parent's log
    stopped = swarm.exits()
    assert {pid: stopped.get(pid) for pid in running} == dict.fromkeys(running, 0), swarm.output()


@kill_counts(4, 12)
def test_reliable_fetch_loses_no_job_when_workers_are_killed(
    e2e_config: kiq.Config, start_worker_process: StartWorker, kills: int
) -> None:
    r = e2e_config.redis
    total = 5000
    Tick.perform_bulk([[40]] * total)
    env = {**RELIABLE, "KIQ_RELIABLE_MAX_INTERRUPTS": "1000"}  # here every interruption is the test's doing
    swarm = run_with_kills(r, start_worker_process, "reliable", env, kills)

    def everything_done() -> bool:
        return r.scard(DONE) == total and not r.exists("queue:default") and not orphans(r)

    wait_until(everything_done, 120, interval=0.5, message=f"all {total} jobs ({r.scard(DONE)} done)")
    stop_all(swarm)
    # the killed workers' liveness keys expire (3 heartbeats); the stopped ones removed theirs and their lists
    wait_until(lambda: not keys(r, "kiq:alive:*"), 10, message="liveness keys to expire")
    assert keys(r, "kiq:working:*") == [] and keys(r, "kiq:recovering:*") == []
    runs, recovered = int(r.get(RUNS) or 0), r.scard(INTERRUPTED)
    print(
        f"\nreliable fetch: {total} jobs, {kills} SIGKILLs, 0 lost, {recovered} recovered from killed workers, "
        f"{runs - total} completions were duplicates"
    )
    assert r.scard(DONE) == total
    assert recovered > 0  # the kills did hit jobs in flight
    assert r.zcard("dead") == 0


@kill_counts(6, 15)
def test_a_crash_loop_kills_no_healthy_job(
    e2e_config: kiq.Config, start_worker_process: StartWorker, kills: int
) -> None:
    """Issue 29's crash loop, with the default interrupt cap (3): a SIGKILL every 1.3 s (15 in ``make soak``) over
    4,000 jobs of 20 ms. Only the jobs running at a kill count an interruption (finished ones are acknowledged
    within 10 ms plus a round trip), so none of these healthy jobs reaches the dead set, and none is lost."""
    r = e2e_config.redis
    total = 4000
    Tick.perform_bulk([[20]] * total)
    swarm = run_with_kills(r, start_worker_process, "reliable", RELIABLE, kills, every=1.3, concurrency=3)

    def everything_done() -> bool:
        return r.scard(DONE) == total and not r.exists("queue:default") and not orphans(r)

    wait_until(everything_done, 60, interval=0.5, message=f"all {total} jobs ({r.scard(DONE)} done)")
    stop_all(swarm)
    runs = [int(count) for count in r.hvals(RUNS_BY_JID)]
    print(
        f"\ncrash loop: {total} jobs, {kills} SIGKILLs, {r.scard(INTERRUPTED)} recovered from killed workers, "
        f"{sum(runs) - total} duplicate completions, most runs of one job {max(runs)}"
    )
    assert r.scard(DONE) == total
    assert r.zrange("dead", 0, -1) == []


def test_basic_fetch_loses_jobs_under_the_same_chaos(e2e_config: kiq.Config, start_worker_process: StartWorker) -> None:
    r = e2e_config.redis
    total, kills = 2000, 2
    Tick.perform_bulk([[40]] * total)
    swarm = run_with_kills(r, start_worker_process, "basic", FAST, kills)
    wait_until(lambda: not r.exists("queue:default"), 60, interval=0.5, message="the queue to drain")
    stop_all(swarm)  # a graceful stop lets the survivors finish what they hold
    lost = total - r.scard(DONE)
    print(f"\nbasic fetch: {total} jobs, {kills} SIGKILLs, {lost} lost")
    assert lost > 0


def test_a_poison_pill_goes_to_dead_after_the_cap_and_other_jobs_flow(
    e2e_config: kiq.Config, start_worker_process: StartWorker
) -> None:
    r = e2e_config.redis
    poison = KillsItsWorker.perform_async()
    first = Tick.perform_bulk([[5]] * 100)
    args = ("-r", "tests.jobs.reliable", "-q", "default", "-c", "2", "--fetch", "reliable")
    # two workers, each restarted when it dies (the swarm's parent does what systemd or Kubernetes would)
    swarm = VictimSwarm(start_worker_process, r, 2, *args, **RELIABLE)
    wait_until(lambda: r.zcard("dead") == 1, 90, interval=0.2, message="the poison pill in dead")
    deaths_of_workers = swarm.deaths()
    later = Tick.perform_bulk([[5]] * 100)
    wait_until(lambda: r.scard(DONE) == len(first) + len(later), 30, message="the other jobs")
    [dead] = [loads(item) for item in r.zrange("dead", 0, -1)]
    assert dead["jid"] == poison
    assert dead["interrupted_count"] == 3
    assert dead["error_class"] == "kiq.plugins.reliable_fetch.recovery.InterruptedJobError"
    assert deaths_of_workers == 3
    wait_until(lambda: r.lrange(DEATHS, 0, -1) == [poison], 10, message="the death hook")
    stop_all(swarm)


@kill_counts(4, 12)
def test_tracked_statuses_converge_when_workers_are_killed(
    e2e_config: kiq.Config, start_worker_process: StartWorker, tracking_db_url: str, kills: int
) -> None:
    """Kill -9 at any point of the ack path: a job's outcome is committed before it leaves Redis, so every event
    ends with its job's real outcome, and the default poison-pill cap kills no healthy job."""
    r = e2e_config.redis
    tracker = track(e2e_config, tracking_db_url)
    total = 500
    task_id = tracker.create_task(TrackedWork, [[index, 300 + index % 5 * 50] for index in range(total)])
    env = {**RELIABLE, "KIQ_PLUGINS": "reliable_fetch tracking", "KIQ_TRACKING_DATABASE_URL": tracking_db_url}
    swarm = run_with_kills(r, start_worker_process, "reliable", env, kills)

    def complete() -> bool:
        summary = tracker.task(task_id, with_events=False)
        return bool(summary and summary["complete"]) and not r.exists("queue:default") and not orphans(r)

    wait_until(complete, 180, interval=0.5, message="the task to complete")
    stop_all(swarm)
    task = tracker.task(task_id)
    assert task is not None
    events = {event["params"][0]: event for event in task["events"]}
    wrong = {index: event["status"] for index, event in events.items() if event["status"] != expected_status(index)}
    print(
        f"\ntracking under chaos: {total} jobs, {kills} SIGKILLs, {r.scard(INTERRUPTED)} recovered, "
        f"counts {task['counts']}"
    )
    assert wrong == {}
    assert task["counts"] == {"enqueued": 0, "working": 0, "finished": 400, "failed": 50, "error": 50}
    assert r.scard(DONE) == 400
    # only the jobs that raised are dead (some twice: killed after dying, before the acknowledgement), and no
    # healthy job reached the interrupt cap
    dead = [loads(item) for item in r.zrange("dead", 0, -1)]
    assert {job["args"][0] % 10 for job in dead} == {7}
    assert len({job["jid"] for job in dead}) == 50
