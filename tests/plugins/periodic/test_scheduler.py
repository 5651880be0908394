"""The scheduler in this process, on a real Redis: of several schedulers firing one tick, one enqueues it; a tick
older than the last one enqueued is refused; a scheduler starts with the first tick after it starts (missed ticks are
not replayed); the schedule the workers run is listed with its last and next run (API and ``kiq periodic``)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis

import kiq
from kiq.cli import main
from kiq.plugins.periodic import PeriodicJob, periodic_statuses
from kiq.plugins.periodic.scheduler import Scheduler
from kiq.plugins.periodic.store import LAST_TICKS, SCHEDULE, prune, publish
from tests.jobs.periodic import Tick
from tests.support import wait_until

EVERY_SECOND = PeriodicJob("* * * * * *", "PeriodicTick", ["s"])


def queued(r: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]


def test_of_many_schedulers_firing_one_tick_one_enqueues_it(config: kiq.Config, r: redis.Redis) -> None:
    schedulers = [Scheduler(config, [(EVERY_SECOND, Tick)]) for _ in range(8)]
    tick = float(int(time.time()))
    start = threading.Barrier(len(schedulers))
    jids: list[str | None] = []

    def fire(scheduler: Scheduler) -> None:
        start.wait()
        jids.append(scheduler.fire(EVERY_SECOND, Tick, tick))

    threads = [threading.Thread(target=fire, args=(scheduler,)) for scheduler in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len([jid for jid in jids if jid is not None]) == 1
    (job,) = queued(r)
    assert (job["class"], job["args"], job["periodic_at"]) == ("PeriodicTick", ["s"], tick)
    assert r.hget(LAST_TICKS, EVERY_SECOND.id) == str(int(tick))


def test_a_tick_older_than_the_last_one_enqueued_is_refused(config: kiq.Config, r: redis.Redis) -> None:
    scheduler = Scheduler(config, [(EVERY_SECOND, Tick)])
    assert scheduler.fire(EVERY_SECOND, Tick, 2_000_000_010) is not None
    assert scheduler.fire(EVERY_SECOND, Tick, 2_000_000_009) is None  # a late process, or a clock behind
    assert scheduler.fire(EVERY_SECOND, Tick, 2_000_000_011) is not None
    assert [job["periodic_at"] for job in queued(r)] == [2_000_000_011, 2_000_000_010]


def test_a_scheduler_starts_with_the_first_tick_after_it_starts(config: kiq.Config, r: redis.Redis) -> None:
    r.hset(LAST_TICKS, EVERY_SECOND.id, int(time.time()) - 3600)  # an hour of ticks missed while no worker ran
    scheduler = Scheduler(config, [(EVERY_SECOND, Tick)])
    started = time.time()
    scheduler.start()
    try:
        wait_until(lambda: r.llen("queue:default") >= 2, 5, message="two ticks")
    finally:
        scheduler.stop()
    ticks = sorted(float(job["periodic_at"]) for job in queued(r))  # type: ignore[arg-type]
    assert ticks[0] > started  # nothing of the missed hour
    assert len(set(ticks)) == len(ticks)


def test_a_queue_in_the_schedule_sends_the_job_there(config: kiq.Config, r: redis.Redis) -> None:
    job = PeriodicJob("* * * * * *", "PeriodicTick", ["q"], queue="low")
    Scheduler(config, [(job, Tick)]).fire(job, Tick, 2_000_000_000)
    assert json.loads(r.lindex("queue:low", 0))["args"] == ["q"]


def test_a_tick_pushes_the_jobs_kwargs_and_a_job_without_any_is_pushed_as_before(
    config: kiq.Config, r: redis.Redis
) -> None:
    keyed = PeriodicJob("* * * * * *", "PeriodicTick", ["k"], queue="keyed", kwargs={"note": "n", "day": "2026-01-02"})
    plain = PeriodicJob("* * * * * *", "PeriodicTick", ["p"], queue="plain")
    scheduler = Scheduler(config, [(keyed, Tick), (plain, Tick)])
    scheduler.start()
    try:
        wait_until(lambda: r.llen("queue:keyed") >= 1 and r.llen("queue:plain") >= 1, 10, message="a tick of each")
    finally:
        scheduler.stop()
    pushed = json.loads(r.lindex("queue:keyed", -1))
    assert (pushed["args"], pushed["kwargs"]) == (["k"], {"note": "n", "day": "2026-01-02"})
    assert "kwargs" not in json.loads(r.lindex("queue:plain", -1))


def test_kwargs_perform_cannot_take_fail_the_tick_with_a_report_and_the_next_ticks_go_on(
    config: kiq.Config, r: redis.Redis
) -> None:
    reports: list[str] = []

    class Reports:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any], config: kiq.Config) -> None:
            reports.append(f"{context['context']}: {exc}")

    config.plugins.register(Reports())
    wrong = PeriodicJob("* * * * * *", "PeriodicTick", ["w"], kwargs={"colour": "red"})
    scheduler = Scheduler(config, [(wrong, Tick)])
    assert scheduler.fire(wrong, Tick, 2_000_000_000) is None
    assert scheduler.fire(wrong, Tick, 2_000_000_001) is None
    assert r.llen("queue:default") == 0
    assert len(reports) == 2 and "colour" in reports[0] and "PeriodicTick" in reports[0]


def test_the_schedule_is_listed_with_its_last_and_next_run(
    config: kiq.Config, r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    weekly = PeriodicJob("0 6 * * MON", "PeriodicTick", ["w"], tz="Europe/Paris", name="weekly")
    publish(r, [EVERY_SECOND, weekly], until=time.time() + 60)
    Scheduler(config, [(weekly, Tick)]).fire(weekly, Tick, 1_700_000_000)
    now = time.time()
    statuses = {status.job.name: status for status in periodic_statuses(config)}
    assert statuses["weekly"].last_run == 1_700_000_000 and statuses["PeriodicTick"].last_run is None
    assert now < statuses["PeriodicTick"].next_run <= now + 2
    assert statuses["weekly"].next_run == weekly.next_tick(now)
    assert config.redis_url is not None
    assert main(["periodic", "--redis-url", config.redis_url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "CRON", "CLASS", "QUEUE", "LAST", "RUN", "NEXT", "RUN"]
    weekly_row = next(line for line in table if line.startswith("weekly"))
    assert "0 6 * * MON" in weekly_row and "2023-11-14 23:13:20 CET" in weekly_row
    assert main(["periodic", "--redis-url", config.redis_url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in listed] == ["PeriodicTick", "weekly"]  # soonest first


def test_the_listing_shows_every_apps_jobs_while_a_live_worker_runs_them(config: kiq.Config, r: redis.Redis) -> None:
    """Two apps sharing the Redis publish their own jobs; a job no worker has refreshed for its time is gone."""
    billing = PeriodicJob("0 * * * *", "BillingRun")
    mailing = PeriodicJob("*/5 * * * *", "MailingRun")
    retired = PeriodicJob("0 0 * * *", "RetiredRun")
    now = time.time()
    publish(r, [billing], until=now + 60)
    publish(r, [mailing], until=now + 60)
    publish(r, [retired], until=now - 1)
    assert sorted(status.job.job for status in periodic_statuses(config)) == ["BillingRun", "MailingRun"]
    prune(r, now)
    assert sorted(r.hkeys(SCHEDULE)) == sorted([billing.id, mailing.id])


def test_the_listing_says_so_when_no_worker_published_a_schedule(
    config: kiq.Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert config.redis_url is not None
    assert main(["periodic", "--redis-url", config.redis_url]) == 0
    assert "no periodic jobs" in capsys.readouterr().out
