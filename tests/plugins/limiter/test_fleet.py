"""Limiters across real worker processes sharing one Redis: a concurrent limiter of 2 is never exceeded by 3 workers
of 5 threads (every job's time inside it is recorded), a killed holder's slot comes back after its lock timeout, and
a window of 10 per second holds while 2 workers of 5 threads push against it for more than 3 seconds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import kiq
from kiq.plugins.limiter import OverLimit, concurrent, limiter_states
from tests.jobs.limiter import GRANTS, HOLD, SPANS, STARTED, Crowded, HoldsSlot, Windowed
from tests.support import FAST, WorkerProcess, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-r", "tests.jobs.limiter", "-c", "5")
# rescheduled jobs come back within about a second: backoff 0.5 s, polls every 0.2 s on average
ENV = {**FAST, "KIQ_PLUGINS": "limiter", "KIQ_LIMITER_BACKOFF": "0.5", "KIQ_POLL_INTERVAL": "0.2"}


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans that overlap at one instant (an end at the instant another starts: no overlap)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in events:  # at equal times, ends (-1) sort before starts
        running += step
        peak = max(peak, running)
    return peak


def test_a_concurrent_limit_of_2_holds_across_3_workers_of_5_threads(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    jobs = 40
    Crowded.perform_bulk([[100]] * jobs)  # 100 ms each: about 2 s of work at 2 at once, for 15 threads
    workers = [start_worker(*WORKER, env=ENV) for _ in range(3)]
    wait_until(lambda: r.llen(SPANS) == jobs, 60, interval=0.2, message=f"all {jobs} jobs ({r.llen(SPANS)} done)")
    for worker in workers:
        assert worker.stop() == 0, worker.output()
    spans = [tuple(json.loads(raw)) for raw in r.lrange(SPANS, 0, -1)]
    rescheduled = int(r.hget("kiq:limiter:overrated", "concurrent:crowd") or 0)
    print(f"\n{jobs} jobs, 15 threads, limit 2: at most {most_at_once(spans)} at once; {rescheduled} reschedules")
    assert most_at_once(spans) == 2  # never more, and the limit was reached
    assert int(r.get("stat:failed") or 0) == 0 and r.zcard("retry") == 0


def test_a_killed_holders_slot_comes_back_after_its_lock_timeout(
    e2e_config: kiq.Config, start_worker_process: StartWorker
) -> None:
    r = e2e_config.redis
    r.set(HOLD, 1)
    HoldsSlot.perform_async()  # takes the only slot of "solo", lock timeout 2 s
    worker = start_worker_process(*WORKER, env=ENV)
    wait_until(lambda: r.llen(STARTED) == 1, message="the holder to start")
    worker.kill()  # SIGKILL: the slot is not given back
    (_, taken_at) = json.loads(r.lindex(STARTED, 0))
    solo = concurrent("solo", 1, lock_timeout=2, wait_timeout=0, config=e2e_config)
    with pytest.raises(OverLimit):
        solo.acquire()
    assert [(s.name, s.in_use) for s in limiter_states(e2e_config)] == [("solo", 1)]

    def acquired() -> bool:
        try:
            solo.acquire().release()
        except OverLimit:
            return False
        return True

    wait_until(acquired, 10, message="the slot to come back")
    assert 2.0 - 0.1 <= time.time() - taken_at < 2.0 + 3  # not before the lock timeout, and soon after it


def test_a_window_of_10_per_second_holds_for_more_than_3_seconds(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    jobs = 45
    Windowed.perform_bulk([[]] * jobs)
    workers = [start_worker(*WORKER, env=ENV) for _ in range(2)]
    wait_until(lambda: r.llen(GRANTS) == jobs, 60, interval=0.2, message=f"all {jobs} jobs ({r.llen(GRANTS)} done)")
    for worker in workers:
        assert worker.stop() == 0, worker.output()
    grants = sorted(float(value) for value in r.lrange(GRANTS, 0, -1))
    # 11 grants in a row always span at least one second: no second, wherever it starts, let in more than 10
    tightest = min(grants[i + 10] - grants[i] for i in range(jobs - 10))
    print(f"\n{jobs} jobs through 10/s in {grants[-1] - grants[0]:.2f} s; tightest 11 in a row: {tightest:.3f} s")
    assert tightest >= 1.0 - 1e-6
    assert grants[-1] - grants[0] >= 4.0 - 1e-6  # 45 grants need 4 seconds past the first 10: held over > 3 s
