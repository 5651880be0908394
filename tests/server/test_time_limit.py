"""Time limits: a job over its ``timeout`` (or the ``job_timeout`` setting) is interrupted (sync) or cancelled
(async) and fails through the retry rules as ``kiq.JobTimeout``; the interruption never lands outside ``perform``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
from kiq.payload import dumps, new_jid
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.support import FAST, Unit, WorkerProcess, run_on_event_loop, wait_until

StartWorker = Callable[..., WorkerProcess]


class Spin(kiq.Job):
    """Busy for ``seconds`` (1e9: forever), catching every ``Exception`` on the way as careless code does."""

    kiq_name = "tests.Spin"

    def perform(self, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # careless code: JobTimeout is no Exception, so it gets through
                time.monotonic()
        return "done"


class Doze(kiq.Job):
    kiq_name = "tests.Doze"

    async def perform(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"


class OwnTimeout(kiq.Job):
    kiq_name = "tests.OwnTimeout"

    async def perform(self) -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)


def payload(name: str, *args: Any, **options: Any) -> str:
    return dumps({"class": name, "args": list(args), "jid": new_jid(), "queue": "default", "retry": 3, **options})


def processor(config: kiq.Config) -> Processor:
    return Processor(config, None, threading.Event(), RedisOutage(config), "t")  # type: ignore[arg-type]


def retried(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.zrange("retry", 0, -1)]


def test_a_sync_job_past_its_limit_is_interrupted_and_retried(config: kiq.Config, r: redis.Redis) -> None:
    worker = processor(config)
    unit = Unit(payload("tests.Spin", 1e9, timeout=0.2))
    started = time.monotonic()
    worker.process(unit)
    assert 0.2 <= time.monotonic() - started < 2
    assert unit.acked == 1 and (worker.processed, worker.failed) == (1, 1)
    (job,) = retried(r)
    assert job["error_class"] == "kiq.errors.JobTimeout"
    assert job["error_message"] == "tests.Spin ran past its time limit of 0.2 s"
    worker.process(fine := Unit(payload("tests.Spin", 0.3)))  # the same thread, no limit: nothing stray lands
    assert fine.acked == 1 and (worker.processed, worker.failed) == (2, 1)


def test_the_job_timeout_setting_limits_jobs_without_the_option(config: kiq.Config, r: redis.Redis) -> None:
    config.job_timeout = 0.2
    worker = processor(config)
    worker.process(Unit(payload("tests.Spin", 1e9)))
    worker.process(Unit(payload("tests.Spin", 0.4, timeout=1)))  # its own option wins over the setting
    assert (worker.processed, worker.failed) == (2, 1) and len(retried(r)) == 1


@pytest.mark.parametrize("bad", ["10", -1, float("nan"), True, [1]])
def test_a_timeout_field_another_producer_wrote_wrong_is_no_limit(config: kiq.Config, r: redis.Redis, bad: Any) -> None:
    worker = processor(config)
    worker.process(Unit(payload("tests.Spin", 0.05, timeout=bad)))
    assert (worker.processed, worker.failed) == (1, 0)


def test_an_option_that_is_no_time_limit_fails_where_it_is_written() -> None:
    with pytest.raises(kiq.ConfigError, match="option 'timeout' must be seconds > 0"):

        class Bad(kiq.Job):
            kiq_options = {"timeout": 0}

            def perform(self) -> None: ...


# Run in a fresh interpreter: on the bug this guards against, the profiled thread loops forever (and would slow this
# test process for good). Python 3.11's PyThreadState_SetAsyncExc(ident, NULL), which disarm used to clear a fired
# limit with, left the interpreter's "exception pending" flag set with nothing to clear it.
AFTER_A_TIMEOUT = """
import sys, threading, time
from kiq.errors import JobTimeout
from kiq.server.time_limit import Watchdog

watchdog = Watchdog("t-watchdog")

def past_its_limit():
    limit = watchdog.arm(0.1)
    try:
        while True:
            time.monotonic()
    except JobTimeout:
        pass
    assert watchdog.disarm(limit)

job = threading.Thread(target=past_its_limit)
job.start()
job.join()

def profiled():
    sys.setprofile(lambda frame, event, arg: None)
    sum(len(str(n)) for n in range(100_000))
    sys.setprofile(None)

later = threading.Thread(target=profiled, daemon=True)
later.start()
later.join(10)
print("stuck" if later.is_alive() else "ran")
"""


def test_after_a_limit_fired_a_profiled_thread_runs_normally() -> None:
    ran = subprocess.run([sys.executable, "-c", AFTER_A_TIMEOUT], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "ran", (ran.stdout, ran.stderr)


def test_jobs_ending_right_at_their_limit_never_leak_the_interruption(config: kiq.Config, r: redis.Redis) -> None:
    """Hundreds of races between the job's end and the watchdog: each job is acknowledged exactly once, either
    done or timed out, and a JobTimeout never escapes into the steps after perform (an internal error, unacked)."""
    errors: list[str] = []

    class Errors:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
            if context["context"] != "Job raised exception":
                errors.append(f"{context['context']}: {exc!r}")

    config.add_plugin(Errors())
    workers = [processor(config) for _ in range(4)]
    # a job as long as its limit: about half end first, half are interrupted (108-196 of 400 in three runs here)
    units = [Unit(payload("tests.Spin", 0.01, timeout=0.01)) for _ in range(400)]

    def run(worker: Processor, mine: list[Unit]) -> None:
        for unit in mine:
            worker.process(unit)

    threads = [threading.Thread(target=run, args=(w, units[i::4])) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert [unit.acked for unit in units] == [1] * 400
    failed = sum(worker.failed for worker in workers)
    assert sum(worker.processed for worker in workers) == 400 and failed == r.zcard("retry")


def test_an_async_job_past_its_limit_is_cancelled_and_retried(config: kiq.Config, r: redis.Redis) -> None:
    started = time.monotonic()
    units = run_on_event_loop(
        config,
        [payload("tests.Doze", 60, timeout=0.3), payload("tests.Doze", 0.05, timeout=5), payload("tests.OwnTimeout")],
    )
    assert time.monotonic() - started < 5
    assert [unit.acked for unit in units] == [1, 1, 1]
    errors = sorted((job["error_class"], job["error_message"]) for job in retried(r))
    assert errors == [
        ("TimeoutError", "TimeoutError"),
        ("kiq.errors.JobTimeout", "tests.Doze ran past its time limit of 0.3 s"),
    ]


def test_limits_in_a_real_worker(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    """The issue's cases: ``while True: pass`` with timeout 1 is interrupted and retried; an async job awaiting 60 s
    with timeout 1 is cancelled."""
    r = e2e_config.redis
    spin = Spin.set(timeout=1, retry=1).perform_async(1e9)
    doze = Doze.set(timeout=1, retry=1).perform_async(60)
    worker = start_worker("-r", "tests.server.test_time_limit", env=FAST)
    wait_until(lambda: r.zcard("retry") == 2, 30, message="both jobs to time out")
    assert {(job["jid"], job["error_class"]) for job in retried(r)} == {
        (spin, "kiq.errors.JobTimeout"),
        (doze, "kiq.errors.JobTimeout"),
    }
    assert worker.stop() == 0
