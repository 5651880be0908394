"""Scheduled jobs and retries start on time: the poller sleeps until the earliest due score and a push of an earlier
job wakes it (core/server/scheduled.py, poller_wake.py). Lateness is measured against the due time each job was
scheduled for, as the job records it; 0.25 s is the bound asked of kiq (a job is enqueued within ~50 ms), beyond the
time this process's threads waited for a CPU (CpuWait: on a loaded machine that wait is the machine's, not
kiq's)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import kiq
from tests.cluster_support import PAIRED_TARGETS
from tests.jobs.on_time import STARTS, Due, FailsFirst, starts
from tests.support import CpuWait, InProcessWorker, wait_until

StartWorker = Callable[..., InProcessWorker]
LATE_BY_AT_MOST = 0.25
JOBS = 20


@pytest.fixture
def cpu_wait() -> Iterator[CpuWait]:
    with CpuWait() as waits:
        yield waits


def registered(r: redis.Redis, count: int, workers: list[InProcessWorker]) -> None:
    wait_until(lambda: r.scard(kiq.ext.keyspace(r).key("processes")) == count, 30,
               message="the workers to register\n" + "\n".join(w.output() for w in workers))  # fmt: skip


def push_spread(count: int, first: float, last: float) -> list[float]:
    """Schedule ``count`` Due jobs from ``first`` to ``last`` seconds ahead, in shuffled order; their due times."""
    now = time.time()
    dues = [now + first + (last - first) * index / (count - 1) for index in range(count)]
    for due in dues[::-2] + dues[-2::-2]:  # not in due order: each push of an earlier job must wake the pollers
        Due.perform_at(due, due)
    return dues


def assert_on_time(
    r: redis.Redis, count: int, workers: list[InProcessWorker], waits: CpuWait
) -> list[dict[str, object]]:
    wait_until(lambda: r.llen(STARTS) >= count, 30,
               message="the jobs to run\n" + "\n".join(w.output() for w in workers))  # fmt: skip
    runs = starts(r)
    assert min(run["started"] - run["due"] for run in runs) >= 0, "a job started before its due time"
    # each job's (enqueued, started) - due, and this process's wait for a CPU meanwhile: the poller or the fetch late
    timeline = sorted(
        (round(run["enqueued"] - run["due"], 3), round(run["started"] - run["due"], 3),
         round(waits.between(run["due"], run["started"]), 3))
        for run in runs
    )  # fmt: skip
    late = [started - waited for _, started, waited in timeline]
    assert max(late) <= LATE_BY_AT_MOST, f"(enqueued, started) - due and the CPU wait meanwhile, in s: {timeline}"
    return runs


@pytest.mark.cluster
@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_scheduled_jobs_start_within_a_quarter_second_of_their_due_time(
    e2e_config: kiq.Config,
    start_worker: StartWorker,
    fetch: str,
    request: pytest.FixtureRequest,
    cpu_wait: CpuWait,
) -> None:
    target = request.node.callspec.params.get("one_redis_url")
    chosen = set(zip(PAIRED_TARGETS, ("reliable", "basic"), strict=True))
    if target not in ("usual", None) and (target, fetch) not in chosen:
        pytest.skip("one cluster target per fetch is enough (a run takes 6 s)")
    r = e2e_config.redis
    worker = start_worker("-r", "tests.jobs.on_time", "-c", "4", env={"KIQ_FETCH": fetch})
    registered(r, 1, [worker])
    time.sleep(1)
    push_spread(JOBS, 0.5, 5.0)
    assert_on_time(r, JOBS, [worker], cpu_wait)


def test_three_workers_enqueue_each_scheduled_job_once(
    e2e_config: kiq.Config, start_worker: StartWorker, cpu_wait: CpuWait
) -> None:
    r = e2e_config.redis
    workers = [start_worker("-r", "tests.jobs.on_time", "-c", "2") for _ in range(3)]
    registered(r, 3, workers)
    push_spread(30, 0.3, 2.0)
    runs = assert_on_time(r, 30, workers, cpu_wait)
    time.sleep(0.5)  # a second enqueue of any of them would have run by now
    assert Counter(run["jid"] for run in starts(r)) == Counter({run["jid"]: 1 for run in runs})


def test_a_retry_runs_within_a_quarter_second_of_its_score(
    e2e_config: kiq.Config, start_worker: StartWorker, cpu_wait: CpuWait
) -> None:
    r = e2e_config.redis
    worker = start_worker("-r", "tests.jobs.on_time", "-c", "2")
    registered(r, 1, [worker])
    jid = FailsFirst.perform_async()
    retry_key = kiq.ext.keyspace(r).key("retry")
    ((member, score),) = wait_until(lambda: r.zrange(retry_key, 0, -1, withscores=True), 30,
                                    message=f"the retry to be recorded\n{worker.output()}")  # fmt: skip
    assert jid in member
    wait_until(lambda: r.llen(STARTS) >= 1, 30, message=f"the retry to run\n{worker.output()}")
    (run,) = starts(r)
    assert run["retry_count"] == 0
    late, waited = run["started"] - score, cpu_wait.between(score, run["started"])
    assert late >= 0 and late - waited <= LATE_BY_AT_MOST, (late, waited)


def set_commands(r: redis.Redis, seconds: float) -> list[str]:
    """The commands Redis receives within ``seconds`` that name the schedule or the retry set (MONITOR; not those
    a script runs)."""
    seen: list[str] = []
    deadline = time.time() + seconds
    database = r.connection_pool.connection_kwargs.get("db", 0)  # MONITOR sees the other test processes' too

    def watch() -> None:
        with r.monitor() as monitor:
            for command in monitor.listen():
                if command["time"] > deadline:
                    return
                named = f" {command['command']} "
                ours = command["db"] == database and command["client_type"] != "lua"
                if ours and (" schedule " in named or " retry " in named):
                    seen.append(command["command"])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    watcher.join(seconds + 10)
    return seen


def test_with_nothing_due_the_sets_are_polled_no_more_than_sidekiqs_interval_says(
    e2e_config: kiq.Config, start_worker: StartWorker, cpu_wait: CpuWait
) -> None:
    """Sidekiq's rule (and kiq's before): a pass of two commands (one per set) every 0.5 to 1.5 poll intervals per
    live process. A job due in an hour must not make the poller look more often."""
    r = e2e_config.redis
    Due.perform_in(3600, 0.0)
    worker = start_worker("-r", "tests.jobs.on_time", "-c", "1", env={"KIQ_POLL_INTERVAL": "0.5"})
    registered(r, 1, [worker])
    window = 6.0
    began = time.time()
    commands = set_commands(r, window)
    passes_at_most = window / (0.5 * 0.5) + 1  # every pass at the shortest interval Sidekiq's rule allows
    assert len(commands) <= 2 * passes_at_most, commands
    # the regular polls go on, in the time this process had a CPU
    ran = window - cpu_wait.between(began, began + window)
    assert len(commands) >= 2 * (ran / (1.5 * 0.5) - 1), (ran, commands)
