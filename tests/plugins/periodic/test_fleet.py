"""Periodic jobs in real worker processes: three workers running one schedule enqueue each tick exactly once; a
worker whose schedule names a class it does not register leaves that entry to the workers that do (a WARNING), but
one that misspells a registered class, or holds a bad cron expression, refuses to start with a clear error instead
of running without its schedule."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable

import pytest

import kiq
from kiq.plugins.periodic import periodic_statuses
from tests.jobs.periodic import TICKS
from tests.support import FAST, WorkerProcess, identity_of, refused_start, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-r", "tests.jobs.periodic", "-c", "2")


def schedule_env(*jobs: dict[str, object]) -> dict[str, str]:
    return {**FAST, "KIQ_PLUGINS": "periodic", "KIQ_PERIODIC": json.dumps(list(jobs))}


def test_three_workers_enqueue_each_tick_exactly_once(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    r = e2e_config.redis
    env = schedule_env({"cron": "*/2 * * * * *", "class": "PeriodicTick", "args": ["fleet"]})  # every 2 s
    workers = [start_worker(*WORKER, env=env) for _ in range(3)]
    for worker in workers:
        identity_of(r, worker)
    all_running = time.time()  # from here on, the three schedulers contend for every tick

    def ticks() -> list[float]:
        return [json.loads(raw)["at"] for raw in r.lrange(TICKS, 0, -1)]

    wait_until(lambda: len([t for t in ticks() if t > all_running]) >= 4, 30, interval=0.2, message="4 ticks")
    for worker in workers:
        assert worker.stop() == 0, worker.output()
    counts = Counter(ticks())
    contended = sorted(tick for tick in counts if tick > all_running)
    print(f"\nticks run: {sorted(counts.items())}")
    assert all(count == 1 for count in counts.values()), counts
    assert [b - a for a, b in itertools.pairwise(contended)] == [2.0] * (len(contended) - 1)
    (status,) = periodic_statuses(e2e_config)
    # the last tick enqueued: run, or still in the queue when the workers stopped (a loaded machine)
    queued = [json.loads(raw)["periodic_at"] for raw in r.lrange("queue:default", 0, -1)]
    assert status.last_run == max([*counts, *queued]) and status.job.args == ["fleet"]


def test_a_worker_runs_a_periodic_job_with_its_kwargs_converted_by_performs_annotations(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    r = e2e_config.redis
    job = {"cron": "* * * * * *", "class": "PeriodicTick", "args": ["kw"], "kwargs": {"note": "n", "day": "2026-01-02"}}
    worker = start_worker(*WORKER, env=schedule_env(job))
    wait_until(lambda: r.llen(TICKS) >= 1, 30, interval=0.2, message=f"a tick\n{worker.output()}")
    run = json.loads(r.lindex(TICKS, 0))
    assert (run["label"], run["note"], run["day"]) == ("kw", "n", ["date", "2026-01-02"])
    (status,) = periodic_statuses(e2e_config)
    assert status.job.kwargs == {"note": "n", "day": "2026-01-02"}
    assert worker.stop() == 0, worker.output()


def test_a_worker_refuses_to_start_when_a_periodic_job_misspells_a_registered_class(
    e2e_config: kiq.Config, start_worker_process: StartWorker
) -> None:
    e2e_config.redis.lpush("queue:default", json.dumps({"class": "PeriodicTick", "args": ["x"], "jid": "1" * 24}))
    env = schedule_env({"cron": "* * * * *", "class": "PeriodicTik"}, {"cron": "* * * * *", "class": "PeriodicTick"})
    worker = start_worker_process(*WORKER, env=env, fork=False)  # what a fresh process registers: -r's jobs only
    assert worker.wait(30) == 2
    output = worker.output()
    assert "kiq: error: periodic jobs name classes this worker does not register: PeriodicTik" in output
    assert "registered: PeriodicTick" in output
    assert e2e_config.redis.llen("queue:default") == 1  # it stopped before fetching anything


def test_a_shared_schedule_entry_for_a_class_this_worker_does_not_import_is_skipped_with_a_warning(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    """A kiq.toml shared by workers of different job modules: an entry for another module's job stopped this one."""
    r = e2e_config.redis
    env = schedule_env({"cron": "* * * * * *", "class": "PeriodicTick", "args": ["mine"]},
                       {"cron": "* * * * * *", "class": "billing.jobs.MonthlyInvoices"})  # fmt: skip
    worker = start_worker(*WORKER, env=env)
    wait_until(lambda: r.llen(TICKS) >= 1, 30, interval=0.2, message=f"a tick\n{worker.output()}")
    output = worker.output()
    assert "WARNING" in output and "this worker does not register billing.jobs.MonthlyInvoices" in output, output
    assert [status.job.job for status in periodic_statuses(e2e_config)] == ["PeriodicTick"]  # what it runs
    assert worker.stop() == 0, worker.output()


def test_a_worker_refuses_to_start_with_a_bad_cron_expression(
    e2e_config: kiq.Config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = e2e_config.redis_url
    assert url is not None
    env = schedule_env({"cron": "*/5 * * *", "class": "PeriodicTick"})
    code, output = refused_start(monkeypatch, capsys, url, WORKER, env)  # in this process: refused at its settings
    assert code == 2, output
    assert (
        "kiq: error: bad value for setting 'periodic' (from environment): periodic job 1 (PeriodicTick): "
        "bad cron expression '*/5 * * *': Wrong number of fields" in output
    )
