"""TERM -> exit within ``-t`` + 2 s (kiq.server.launcher.EXIT_GRACE), with jobs that ignore the stop and run on:
single process and swarm, basic and reliable fetch, sync and async jobs; the jobs are back in their queue."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import kiq
from tests.jobs.stop import STARTED, Stubborn, StubbornAsync
from tests.support import FAST, FAST_RECOVERY, WorkerProcess, exit_late, stopped_after_term, wait_until

StartWorker = Callable[..., WorkerProcess]

TIMEOUT = 3.0  # the -t given
PROMISE = 2.0  # seconds past -t within which the process exits (docs/guide/operations.md, "Stop timing")


@pytest.mark.parametrize(
    ("job", "fetch", "processes"),
    [
        (Stubborn, "basic", "1"),
        (StubbornAsync, "basic", "1"),
        (Stubborn, "reliable", "1"),
        (StubbornAsync, "reliable", "2"),
        (Stubborn, "basic", "2"),
    ],
    ids=["sync-basic", "async-basic", "sync-reliable", "async-reliable-swarm", "sync-basic-swarm"],
)
def test_term_exits_within_the_timeout_plus_two_seconds_with_the_jobs_requeued(
    e2e_config: kiq.Config, start_worker_process: StartWorker, job: type[kiq.Job], fetch: str, processes: str
) -> None:
    r = e2e_config.redis
    jids = [job.perform_async(120) for _ in range(2 * int(processes))]  # one per thread
    env = FAST_RECOVERY if fetch == "reliable" else FAST
    worker = start_worker_process(
        "-r", "tests.jobs.stop", "-c", "2", "-p", processes, "-t", str(TIMEOUT), "--fetch", fetch, env=env
    )

    def running() -> bool:  # every job taken (an async one may wait behind the one blocking its loop), all started
        return r.llen("queue:default") == 0 and r.llen(STARTED) >= 1 and r.scard("processes") == int(processes)

    wait_until(running, 60, message="the jobs running")
    elapsed, waited, code = stopped_after_term(worker, TIMEOUT + 30)
    assert code == 0, worker.output()
    assert elapsed >= TIMEOUT - 0.1 and elapsed - waited <= TIMEOUT + PROMISE, exit_late(elapsed, waited, TIMEOUT)
    # nothing lost: every job is back in its queue (a stop requeues what still runs), nothing left elsewhere
    assert sorted(record.jid for record in kiq.Queue("default", e2e_config)) == sorted(jids)
    assert not list(r.scan_iter(match="kiq:working:*"))
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # requeued as they were: no failure counted
    if fetch == "basic" and job is Stubborn:  # each process says what it pushed back
        assert worker.output().count("pushed 2 jobs back to Redis") == int(processes), worker.output()


def test_a_stop_that_hangs_past_the_grace_exits_anyway_with_the_jobs_requeued(
    e2e_config: kiq.Config, start_worker_process: StartWorker
) -> None:
    jids = [Stubborn.perform_async(120) for _ in range(2)]
    env = {**FAST, "KIQ_PLUGINS": "tests.jobs.stop:HangingShutdown"}
    worker = start_worker_process("-r", "tests.jobs.stop", "-c", "2", "-t", str(TIMEOUT), env=env)
    r = e2e_config.redis
    wait_until(lambda: r.llen(STARTED) == 2, 60, message="the jobs running")
    elapsed, waited, code = stopped_after_term(worker, TIMEOUT + 30)
    assert code == 1 and "the stop did not end within timeout + 1.5 s" in worker.output()
    assert elapsed - waited <= TIMEOUT + PROMISE, exit_late(elapsed, waited, TIMEOUT)
    assert sorted(record.jid for record in kiq.Queue("default", e2e_config)) == sorted(jids)
