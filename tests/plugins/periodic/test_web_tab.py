"""The periodic plugin's dashboard tab, called as the dashboard calls it (the ``kiq_web_tabs`` hook, then
``tab.render``) on a real Redis: the schedule the live workers publish, soonest first, with the next run and the last
tick enqueued; the jobs this config declares that no live worker runs; text handed back as it is; Redis away raises."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import kiq
from kiq.plugins.periodic import PeriodicJob, PeriodicPlugin, register
from kiq.plugins.periodic.scheduler import Scheduler
from kiq.plugins.periodic.store import publish
from kiq.tabs import Heading, Table, TabView, When
from tests.jobs.periodic import Tick
from tests.support import render_tab

COLUMNS = ["Name", "Cron", "Time zone", "Job class", "Queue", "Arguments", "Next run", "Last enqueued"]
WEEKLY = PeriodicJob("0 6 * * MON", "PeriodicTick", ["w"], queue="low", tz="Europe/Paris", name="weekly")
YEARLY = PeriodicJob("0 0 1 1 *", "PeriodicTick", [], name="yearly")


def render(config: kiq.Config, path: str = "") -> TabView:
    return render_tab(config, "periodic", "Periodic", path)


def tables(view: TabView) -> list[Table]:
    return [block for block in view.blocks if isinstance(block, Table)]


def rows(table: Table) -> dict[str, dict[str, Any]]:
    return {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}


def test_a_jobs_kwargs_show_after_its_args(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(PeriodicPlugin)
    keyed = PeriodicJob("0 * * * *", "PeriodicTick", ["k"], name="keyed", kwargs={"note": "<b>n</b>"})
    publish(r, [keyed], until=time.time() + 60)
    (table,) = tables(render(config))
    assert rows(table)["keyed"]["Arguments"] == '["k"] {"note": "<b>n</b>"}'  # text: the dashboard escapes it


def test_the_schedule_of_the_live_workers_with_next_and_last_run(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(PeriodicPlugin)
    every_second = PeriodicJob("* * * * * *", "PeriodicTick", ["s"])
    publish(r, [YEARLY, WEEKLY, every_second], until=time.time() + 60)
    Scheduler(config, [(WEEKLY, Tick)]).fire(WEEKLY, Tick, 1_700_000_000)

    before = time.time()
    view = render(config)
    after = time.time()
    assert view.title == "Periodic"
    (table,) = tables(view)
    assert list(table.columns) == COLUMNS
    assert [row[0] for row in table.rows] == ["PeriodicTick", "weekly", "yearly"]  # soonest first
    listed = rows(table)
    assert listed["weekly"] == {
        "Name": "weekly",
        "Cron": "0 6 * * MON",
        "Time zone": "Europe/Paris",
        "Job class": "PeriodicTick",
        "Queue": "low",
        "Arguments": '["w"]',
        "Next run": When(WEEKLY.next_tick(before)),
        "Last enqueued": When(1_700_000_000),
    }
    assert (listed["yearly"]["Queue"], listed["yearly"]["Last enqueued"]) == ("(the job's)", "never")
    next_second = listed["PeriodicTick"]["Next run"]
    assert isinstance(next_second, When) and next_second.epoch is not None
    assert before < next_second.epoch <= after + 1


def test_jobs_declared_here_that_no_live_worker_runs_are_listed_apart(config: kiq.Config, r: redis.Redis) -> None:
    register(config, WEEKLY.cron, "PeriodicTick", args=["w"], queue="low", tz="Europe/Paris", name="weekly")
    register(config, "*/5 * * * *", "Forgotten", args=[1], name="forgotten")
    config.periodic = [{"cron": "0 0 * * *", "class": "FromSettings"}]
    r.hset("kiq:periodic:last", PeriodicJob("0 0 * * *", "FromSettings").id, 1_600_000_000)
    publish(r, [WEEKLY], until=time.time() + 60)  # a live worker runs this one (the same job: the same id)
    publish(r, [YEARLY], until=time.time() - 1)  # no live worker runs this one any more

    view = render(config)
    running, idle = tables(view)
    assert [row[0] for row in running.rows] == ["weekly"]
    assert Heading("Declared here, run by no live worker") in view.blocks
    assert list(idle.columns) == [*COLUMNS[:6], "Last enqueued"]
    assert rows(idle) == {
        "FromSettings": {
            "Name": "FromSettings",
            "Cron": "0 0 * * *",
            "Time zone": "UTC",
            "Job class": "FromSettings",
            "Queue": "(the job's)",
            "Arguments": "[]",
            "Last enqueued": When(1_600_000_000),
        },
        "forgotten": {
            "Name": "forgotten",
            "Cron": "*/5 * * * *",
            "Time zone": "UTC",
            "Job class": "Forgotten",
            "Queue": "(the job's)",
            "Arguments": "[1]",
            "Last enqueued": "never",
        },
    }

    publish(
        r, [PeriodicJob("*/5 * * * *", "Forgotten", [1], name="forgotten")], until=time.time() + 60
    )  # now a worker runs it
    running, idle = tables(render(config))
    assert sorted(row[0] for row in running.rows) == ["forgotten", "weekly"]
    assert [row[0] for row in idle.rows] == ["FromSettings"]


def test_nothing_scheduled_says_so_and_other_paths_are_not_found(config: kiq.Config) -> None:
    config.add_plugin(PeriodicPlugin)
    view = render(config)
    (table,) = tables(view)
    assert table.rows == [] and "no live worker" in table.empty
    assert len(view.blocks) == 1  # nothing declared here either
    for path in ("weekly", "../x"):
        with pytest.raises(LookupError):
            render(config, path)


def test_markup_nul_and_lone_surrogates_come_back_as_plain_text(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(PeriodicPlugin)
    odd = PeriodicJob("0 6 * * *", "<b>Job</b>", ["<script>alert(1)</script>\x00", "caf\udce9"], name="<i>\udce9")
    publish(r, [odd], until=time.time() + 60)
    (table,) = tables(render(config))
    (row,) = table.rows
    assert row[:4] == ["<i>\udce9", "0 6 * * *", "UTC", "<b>Job</b>"]
    assert row[5] == '["<script>alert(1)</script>\\u0000", "caf\udce9"]'  # JSON text: NUL as its escape


def test_redis_away_raises(tmp_path: Any) -> None:
    config = kiq.Config(redis_url=f"unix://{tmp_path / 'no-redis.sock'}", plugins=["periodic"])
    with pytest.raises(redis.ConnectionError):
        render(config)
