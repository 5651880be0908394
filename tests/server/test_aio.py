"""Async jobs in real ``kiq worker`` processes: they run on the capsule's event loop next to sync jobs, hundreds
at once, through the retry rules, and a stop or a kill -9 loses none of them."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable

import pytest

import kiq
from tests.jobs.basic import Record
from tests.jobs.coroutines import AsyncBoom, Context, Nap, nap_function
from tests.support import FAST, FAST_RECOVERY, WorkerProcess, make_retries_due, wait_until
from tests.swarm_support import VictimSwarm

pytestmark = pytest.mark.slow
StartWorker = Callable[..., WorkerProcess]
JOBS = ("-r", "tests.jobs.coroutines")


def test_async_and_sync_jobs_run_side_by_side_in_one_queue(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Nap.perform_async(0.01, "class")
    nap_function.perform_async("function")
    Record.perform_async("sync")
    Context.perform_async("context")
    worker = start_worker(*JOBS, env=FAST)
    wait_until(lambda: r.scard("napped") == 2 and r.hget("performed", "sync") and r.hget("contexts", "context"), 30)
    assert r.smembers("napped") == {"class", "function"}
    assert worker.stop() == 0
    output = worker.output()
    jid = r.hget("contexts", "context")
    # the job's log context is current inside the coroutine, and its end is logged like a thread's job
    assert any(f"class=Context jid={jid} INFO: inside context" in line for line in output.splitlines()), output
    assert sum(" INFO: done" in line and "class=Nap " in line for line in output.splitlines()) == 1
    assert "never awaited" not in output


def test_a_thousand_awaiting_jobs_drain_together(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Nap.perform_bulk([[0.2, str(n)] for n in range(1000)])
    started = time.monotonic()
    worker = start_worker(*JOBS, env={**FAST, "KIQ_ASYNC_CONCURRENCY": "200"})
    wait_until(lambda: r.scard("napped") == 1000, 60, message=f"1000 naps ({r.scard('napped')} done)")
    elapsed = time.monotonic() - started
    # one at a time this is 200 s, and 20 s on 10 threads; 200 at once: about 1 s plus the worker's start
    assert elapsed < 10, elapsed
    assert worker.stop() == 0
    assert r.zcard("retry") == 0 and len(r.hvals("nap_runs")) == 1000


def test_term_requeues_awaiting_jobs_and_exits_0(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    Nap.perform_bulk([[60, str(n)] for n in range(20)])
    worker = start_worker(*JOBS, "-t", "1", env=FAST)
    wait_until(lambda: r.llen("nap_started") == 20, 30, message="all 20 jobs awaiting")
    assert r.llen("queue:default") == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    # cancelled at the deadline: back in the queue, not finished, not retried
    requeued = {json.loads(raw)["args"][1] for raw in r.lrange("queue:default", 0, -1)}
    assert requeued == {str(n) for n in range(20)}
    assert r.scard("napped") == 0 and r.zcard("retry") == 0
    output = worker.output()
    assert "terminating 0 busy threads and 20 async jobs" in output
    assert output.count("WARNING: requeued Nap jid=") == 20  # what hung, and for how long
    assert re.search(r"requeued Nap jid=[0-9a-f]{24} after \d+ s", output)


def test_a_raising_coroutine_is_retried_then_dead(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    jid = AsyncBoom.perform_async("b")
    worker = start_worker(*JOBS, env={**FAST, "KIQ_POLL_INTERVAL": "0.2"})
    wait_until(lambda: r.zcard("retry") == 1, 30, message="the job's first failure")
    make_retries_due(r)  # not Sidekiq's first delay of 15-24 s
    wait_until(lambda: r.zcard("dead") == 1, 30, message="the job to die after its retry")
    assert worker.stop() == 0
    (dead,) = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert (dead["jid"], dead["error_class"], dead["error_message"]) == (jid, "ValueError", "async boom b")
    assert dead["retry_count"] == 1 and r.hget("boom_runs", "b") == "2"
    assert int(r.get("stat:failed") or 0) == 2


def test_kill_9_with_reliable_fetch_loses_no_async_job(
    start_worker_process: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    total = 400
    Nap.perform_bulk([[0.5, str(n)] for n in range(total)])
    env = {**FAST_RECOVERY, "KIQ_ASYNC_CONCURRENCY": "50"}
    # 2 workers, the children of one swarm: the parent starts another in place of each one killed
    swarm = VictimSwarm(start_worker_process, r, 2, *JOBS, "--fetch", "reliable", **env)
    for _ in range(3):  # kill one while its 50 coroutines await
        wait_until(lambda: r.llen("nap_started") >= 60, 30)
        r.delete("nap_started")
        swarm.kill(until=swarm.busy)
    wait_until(lambda: r.scard("napped") == total, 90, message=f"every job ({r.scard('napped')} done)")
    assert swarm.stop() == 0  # the children alive at the end stopped cleanly
    assert swarm.deaths() == 3
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    assert len(r.hvals("nap_runs")) == total  # every job finished at least once (a finished one killed before
    # its acknowledgement runs again: at least once)
    restarted = sum(int(count) > 1 for count in r.hvals("nap_starts"))
    assert restarted >= 50  # the kills hit jobs in flight (50 awaiting per worker): recovered and run again
