"""Declaring periodic jobs: in the ``periodic`` setting (kiq.toml tables, code, ``KIQ_PERIODIC`` JSON) or with
``register`` in code; every mistake is refused where it is written, naming the job; time zones and DST are the cron
library's, in the job's zone (UTC by default)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import kiq
from kiq.plugins.periodic import PeriodicJob, PeriodicPlugin, register
from tests.jobs.periodic import Tick
from tests.support import ROOT


def configured(*jobs: dict[str, Any]) -> kiq.Config:
    return kiq.Config(redis_url="redis://unused", plugins=["periodic"], periodic=list(jobs))


def test_jobs_come_from_kiq_toml_tables(tmp_path: Path) -> None:
    (tmp_path / "kiq.toml").write_text(
        'plugins = ["periodic"]\n\n[[periodic]]\ncron = "*/5 * * * *"\nclass = "PeriodicTick"\nargs = ["five"]\n\n'
        '[[periodic]]\ncron = "0 6 * * MON"\nclass = "PeriodicTick"\nargs = ["monday"]\nqueue = "low"\n'
        'tz = "Europe/Paris"\nname = "weekly"\n'
    )
    config = kiq.Config.load(tmp_path / "kiq.toml", env={})
    assert config.plugins.find(PeriodicPlugin).schedule(config) == [  # type: ignore[union-attr]
        PeriodicJob("*/5 * * * *", "PeriodicTick", ["five"]),
        PeriodicJob("0 6 * * MON", "PeriodicTick", ["monday"], "low", "Europe/Paris", "weekly"),
    ]
    assert config.get("periodic")[0] == {  # the setting's value, complete, as `kiq settings` shows it
        "cron": "*/5 * * * *", "class": "PeriodicTick", "args": ["five"], "queue": None, "tz": "UTC",
        "name": "PeriodicTick",  # by default, the job's name
    }  # fmt: skip


def test_kwargs_come_from_a_toml_table_and_are_kept_in_the_setting(tmp_path: Path) -> None:
    (tmp_path / "kiq.toml").write_text(
        'plugins = ["periodic"]\n\n[[periodic]]\ncron = "0 * * * *"\nclass = "PeriodicTick"\nargs = ["hourly"]\n'
        'kwargs = { note = "from toml", day = "2026-01-02" }\n'
    )
    config = kiq.Config.load(tmp_path / "kiq.toml", env={})
    (job,) = config.plugins.find(PeriodicPlugin).schedule(config)  # type: ignore[union-attr]
    kwargs = {"note": "from toml", "day": "2026-01-02"}
    assert job == PeriodicJob("0 * * * *", "PeriodicTick", ["hourly"], kwargs=kwargs)
    assert config.get("periodic")[0]["kwargs"] == kwargs


def test_jobs_come_from_json_in_the_environment() -> None:
    env = {"KIQ_PLUGINS": "periodic", "KIQ_PERIODIC": json.dumps([{"cron": "* * * * * *", "class": "PeriodicTick"}])}
    (job,) = kiq.Config.load(env=env, redis_url="redis://unused").get("periodic")
    assert (job["cron"], job["class"], job["args"], job["tz"]) == ("* * * * * *", "PeriodicTick", [], "UTC")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"cron": "61 * * * *", "class": "Report"},
            "periodic job 1 (Report): bad cron expression '61 * * * *': Bad minute",
        ),
        ({"cron": "* * *", "class": "Report"}, "bad cron expression '* * *': Wrong number of fields"),
        ({"cron": "0 0 30 2 *", "class": "Report"}, "bad cron expression '0 0 30 2 *': Bad day-of-month"),
        ({"cron": "@hourly", "class": "Report"}, "bad cron expression '@hourly'"),
        ({"cron": 5, "class": "Report"}, "'cron' must be a cron expression, got 5"),
        ({"cron": "* * * * *", "class": "Report", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *", "class": "Report", "args": 5}, "'args' must be a list, got 5"),
        ({"cron": "* * * * *", "class": "Report", "args": [float("nan")]}, "'args' must be JSON"),
        ({"cron": "* * * * *", "class": "Report", "kwargs": ["a", 1]}, "'kwargs' must be a table of keyword argu"),
        ({"cron": "* * * * *", "class": "Report", "kwargs": {"a-b": 1}}, "'kwargs' names must be parameter names"),
        ({"cron": "* * * * *", "class": "Report", "kwargs": {"a": float("inf")}}, "'kwargs' must be JSON"),
        ({"cron": "* * * * *", "class": "Report", "queue": ""}, "'queue' must be a queue name"),
        ({"cron": "* * * * *", "class": ""}, "'class' must be the name of a job"),
        ({"cron": "* * * * *"}, "a periodic job needs 'cron' and 'class'"),
        (
            {"cron": "* * * * *", "class": "Report", "klass": "X"},
            "unknown key 'klass' (a periodic job has: cron, class",
        ),
        ("* * * * * Report", "expected a table with cron and class"),
    ],
)
def test_a_mistake_is_refused_when_the_config_is_built(table: object, message: str) -> None:
    with pytest.raises(kiq.ConfigError) as refused:
        configured(table)  # type: ignore[arg-type]
    assert str(refused.value).startswith("bad value for setting 'periodic' (from arguments): periodic job 1")
    assert message in str(refused.value)


def test_the_periodic_setting_needs_the_plugin() -> None:
    with pytest.raises(kiq.ConfigError, match="unknown setting 'periodic'"):
        kiq.Config(redis_url="redis://unused", periodic=[])


def test_register_declares_a_job_in_code_and_refuses_a_bad_one() -> None:
    config = kiq.Config(redis_url="redis://unused")
    job = register(config, "0 * * * *", Tick, args=["hourly"], tz="Asia/Tokyo")
    assert (job.job, job.args, job.tz) == ("PeriodicTick", ["hourly"], "Asia/Tokyo")
    assert config.plugins.find(PeriodicPlugin).schedule(config) == [job]  # type: ignore[union-attr]
    with pytest.raises(kiq.ConfigError, match="periodic job PeriodicTick: bad cron expression 'every hour'"):
        register(config, "every hour", Tick)
    keyed = register(config, "0 * * * *", Tick, args=["hourly"], kwargs={"note": "n"})
    assert keyed.kwargs == {"note": "n"} and job.kwargs == {}
    with pytest.raises(kiq.ConfigError, match="periodic job PeriodicTick: 'kwargs' must be JSON"):
        register(config, "0 * * * *", Tick, kwargs={"note": object()})


def test_seconds_come_first_in_six_fields() -> None:
    job = PeriodicJob("*/10 * * * * *", "PeriodicTick")
    assert job.next_tick(1_000_000_003.5) == 1_000_000_010


def test_ticks_follow_the_jobs_time_zone_across_dst() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    job = PeriodicJob("30 2 * * *", "PeriodicTick", tz="Europe/Berlin")
    before_spring = datetime(2024, 3, 31, 0, 0, tzinfo=berlin).timestamp()
    # 02:30 does not exist that night (02:00 -> 03:00): Debian's cron runs it when the clock jumps, at 03:00 CEST
    assert datetime.fromtimestamp(job.next_tick(before_spring), berlin) == datetime(2024, 3, 31, 3, 0, tzinfo=berlin)
    new_york = PeriodicJob("0 9 * * *", "PeriodicTick", tz="America/New_York")
    winter = datetime(2024, 1, 10).timestamp()
    summer = datetime(2024, 7, 10).timestamp()
    assert datetime.fromtimestamp(new_york.next_tick(winter), ZoneInfo("UTC")).hour == 14
    assert datetime.fromtimestamp(new_york.next_tick(summer), ZoneInfo("UTC")).hour == 13


def test_the_schedule_key_depends_on_what_runs_not_on_the_name() -> None:
    job = PeriodicJob("* * * * *", "PeriodicTick", [1])
    assert job.id == PeriodicJob("* * * * *", "PeriodicTick", [1], name="other").id
    assert job.id != PeriodicJob("* * * * *", "PeriodicTick", [2]).id
    assert job.id != PeriodicJob("* * * * *", "PeriodicTick", [1], kwargs={"note": "n"}).id
    # a job without kwargs keeps the key it had before kwargs existed: its last tick is not forgotten on upgrade
    assert job.id == "608540aad0cc28d0"


def test_without_cronsim_only_declaring_a_periodic_job_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kiq`` loads every installed plugin for its commands: without the periodic extra, nothing breaks until a
    periodic job is declared, and then the error says what to install."""
    check = (
        "import sys; sys.modules['cronsim'] = None  # any import of it fails\n"
        "import kiq, kiq.cli\nkiq.cli.build_parser().parse_args(['periodic'])\n"
        "kiq.Config(redis_url='redis://unused', plugins=['periodic'], periodic=[])\n"
    )
    loaded = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    monkeypatch.setitem(sys.modules, "cronsim", None)
    with pytest.raises(kiq.ConfigError, match=r"periodic jobs need cronsim: pip install 'kiq\[periodic\]'"):
        configured({"cron": "* * * * *", "class": "Report"})
