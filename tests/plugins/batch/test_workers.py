"""Batches in real ``kiq worker`` processes: 500 jobs across 3 workers fire ``complete`` and ``success`` once each, 20
times over; a failed job completes the batch and ``success`` waits for its retry; a child completes before its
parent; with reliable fetch, 2 SIGKILLs (5 in ``make soak``) during a batch still push each callback exactly once;
and an outcome Redis refuses keeps its job in the worker's working list until it is written."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import kiq
from kiq.plugins.batch import Batch, BatchPlugin, status
from tests.jobs.batch import FAIL, ORDER, RUNS, Callback, Counted, Flaky, MakesChild, Marked, Noop
from tests.support import FAST, WorkerProcess, kill_counts, make_retries_due, wait_until
from tests.swarm_support import VictimSwarm

from .conftest import events

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.batch", "-q", "default", "-c", "5")
ENV = {**FAST, "KIQ_PLUGINS": "batch", "KIQ_POLL_INTERVAL": "0.2"}
RELIABLE_ARGS = ("-r", "tests.jobs.batch", "-q", "default", "-c", "4", "--fetch", "reliable")
RELIABLE_ENV = {
    **FAST,
    "KIQ_PLUGINS": "batch reliable_fetch",
    "KIQ_RELIABLE_RECOVERY_INTERVAL": "1",
    "KIQ_RELIABLE_MAX_INTERRUPTS": "1000",  # every interruption here is the test's doing
}
UNSERVED = Callback.set(queue="callbacks")  # no worker here fetches this queue: the test counts what was pushed


@pytest.fixture
def config(e2e_config: kiq.Config) -> Iterator[kiq.Config]:
    plugin = e2e_config.add_plugin(BatchPlugin)
    yield e2e_config
    plugin.kiq_shutdown(e2e_config)


def pushed_callbacks(r: redis.Redis) -> Counter[tuple[str, str]]:
    payloads = [json.loads(raw)["batch_callback"] for raw in r.lrange("queue:callbacks", 0, -1)]
    return Counter((fired["bid"], fired["event"]) for fired in payloads)


def working_lists(r: redis.Redis) -> list[str]:
    return [key for key in r.scan_iter(match="kiq:working:*", count=1000) if r.llen(key)]


def test_500_jobs_across_3_workers_fire_complete_and_success_once_each_20_times(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = config.redis
    for _ in range(3):
        start_worker(*ARGS, env=ENV)
    bids = []
    for _ in range(20):
        with Batch(on_complete=Callback, on_success=Callback) as batch:
            Noop.perform_bulk([[index] for index in range(500)])
        bids.append(batch.bid)

    def all_fired() -> bool:
        return all(events(r, bid) == {"complete": 1, "success": 1} for bid in bids)

    wait_until(all_fired, 90, interval=0.2, message="every batch's callbacks")
    assert all(found is not None and found.total == 500 and found.success for found in map(status, bids))
    assert r.llen("queue:default") == 0
    assert sum(int(count) for count in r.hgetall("batch-test:fired").values()) == 40  # none ran twice


def test_a_failed_job_completes_the_batch_and_success_waits_for_its_retry(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = config.redis
    r.set(FAIL, 1)
    with Batch(on_complete=Callback, on_success=Callback) as batch:
        Flaky.perform_async()
        Noop.perform_bulk([[index] for index in range(50)])
    start_worker(*ARGS, env=ENV)
    wait_until(lambda: events(r, batch.bid) == {"complete": 1} and r.zcard("retry") == 1, message="complete")
    failing = status(batch.bid)
    assert failing is not None and (failing.pending, failing.failures, failing.success) == (1, 1, False)
    r.delete(FAIL)
    make_retries_due(r)
    wait_until(lambda: events(r, batch.bid) == {"complete": 1, "success": 1}, message="success after the retry")


def test_a_nested_batch_completes_only_after_its_children(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    with Batch("parent", on_complete=Callback, on_success=Callback) as parent:
        MakesChild.perform_async(20, 20)
        Marked.perform_async("parent-job")
    for _ in range(2):
        start_worker(*ARGS, env=ENV)
    wait_until(lambda: events(r, parent.bid) == {"complete": 1, "success": 1}, message="the parent's callbacks")
    order = r.lrange(ORDER, 0, -1)
    child = next(entry.removeprefix("child:") for entry in order if entry.startswith("child:"))
    assert events(r, child) == {"complete": 1, "success": 1}
    children_done = max(order.index(f"{child}:{event}") for event in ("complete", "success"))
    last_child_job = max(index for index, entry in enumerate(order) if entry.startswith("job:child-"))
    assert last_child_job < children_done < order.index(f"{parent.bid}:complete")


@kill_counts(2, 5)
def test_with_reliable_fetch_and_sigkills_each_callback_is_pushed_once(
    config: kiq.Config, start_worker_process: StartWorker, kills: int
) -> None:
    r = config.redis
    total = 1500
    with Batch(on_complete=UNSERVED, on_success=UNSERVED, on_death=UNSERVED) as batch:
        Counted.perform_bulk([[40]] * total)
    # 3 workers, the children of one swarm: the parent starts a new one in place of each killed
    swarm = VictimSwarm(start_worker_process, r, 3, *RELIABLE_ARGS, **RELIABLE_ENV)
    swarm.ready()
    pending_at_kills = []
    for _ in range(kills):
        wait_until(lambda: r.hlen(RUNS) > 0, message="jobs to run")
        time.sleep(0.6)  # pacing the chaos, not timing anything asserted
        found = status(batch.bid)
        assert found is not None
        pending_at_kills.append(found.pending)
        swarm.kill(until=swarm.busy)  # SIGKILL, a child with jobs in flight
    assert all(pending > 0 for pending in pending_at_kills), pending_at_kills  # every kill came during the batch

    def succeeded() -> bool:
        found = status(batch.bid)
        return found is not None and found.success

    wait_until(succeeded, 90, interval=0.2, message="the batch to succeed")
    wait_until(lambda: not working_lists(r), 30, message="the working lists to empty")
    swarm.stop()
    assert swarm.deaths() == kills
    runs = {jid: int(count) for jid, count in r.hgetall(RUNS).items()}
    print(f"\nbatch under {kills} SIGKILLs: {total} jobs, {sum(runs.values()) - total} ran twice, pending at each "
          f"kill: {pending_at_kills}")  # fmt: skip
    assert len(runs) == total
    assert pushed_callbacks(r) == Counter({(batch.bid, "complete"): 1, (batch.bid, "success"): 1})
    found = status(batch.bid)
    assert found is not None and (found.total, found.pending, found.failures) == (total, 0, 0)


def test_an_outcome_redis_refuses_keeps_the_job_in_the_working_list_until_written(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = config.redis
    with Batch(on_complete=UNSERVED, on_success=UNSERVED) as batch:
        Counted.perform_async()
    r.set(f"kiq:batch:{batch.bid}:failed", "not a set")  # the batch's writes fail with WRONGTYPE
    start_worker(*RELIABLE_ARGS, env=RELIABLE_ENV)
    wait_until(lambda: r.hlen(RUNS) == 1, message="the job to run")
    wait_until(lambda: working_lists(r), message="the job held in the working list")
    time.sleep(1.5)  # several heartbeats and acknowledgement flushes: it is still held
    assert len(working_lists(r)) == 1 and r.llen("queue:callbacks") == 0
    r.delete(f"kiq:batch:{batch.bid}:failed")
    wait_until(lambda: not working_lists(r), 15, message="the job to be acknowledged once its outcome is written")
    assert pushed_callbacks(r) == Counter({(batch.bid, "complete"): 1, (batch.bid, "success"): 1})
    assert r.hlen(RUNS) == 1
