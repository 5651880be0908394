"""What an operator sees of job groups: ``kiq groups [QUEUE] [--json]``, the fleet metrics readings."""

from __future__ import annotations

import json

import pytest

import kiq
from kiq.cli import main
from kiq.plugins.groups.metrics import fleet_readings
from tests.jobs.groups import Sleeps


@pytest.fixture
def groups(config: kiq.Config) -> kiq.Config:
    config.add_plugin("groups")
    Sleeps.set(group="acme").perform_bulk([[1]] * 3)
    Sleeps.set(group="tenant:{7}\x1b☃").perform_async(1)
    Sleeps.set(group="quiet", queue="low").perform_async(1)
    kiq.Queue("default").group("acme").concurrency = 4
    kiq.Queue("default").group("idle").concurrency = 0
    kiq.Queue("low").group("quiet").pause()
    return config


def test_kiq_groups_lists_every_queues_groups(groups: kiq.Config, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--redis-url", str(groups.redis_url)]
    assert main(["groups", *url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["QUEUE", "GROUP", "READY", "RUNNING", "LIMIT", "PAUSED"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["default", "acme", "3", "0", "4"],
        ["default", "tenant:{7}\\x1b☃", "1", "0", "default"],
        ["default", "idle", "0", "0", "none"],
        ["low", "quiet", "1", "0", "default"],
    ]
    assert lines[-1].split()[-1] == "yes"
    assert main(["groups", "low", "--json", *url]) == 0
    [low] = json.loads(capsys.readouterr().out)
    assert low["groups"] == 1 and low["waiting"] == 1
    assert low["shown"] == [{"queue": "low", "name": "quiet", "ready": 1, "running": 0, "limit": None, "paused": True}]
    assert main(["groups", "default", "--limit", "1", *url]) == 0
    assert "default: 1 of 3 groups shown (4 jobs waiting)" in capsys.readouterr().out


def test_the_metrics_count_active_groups_and_waiting_jobs_per_queue(groups: kiq.Config) -> None:
    readings = {(reading.name, reading.labels): reading.value for reading in fleet_readings(groups)}
    assert readings[("kiq_groups_active", (("queue", "default"),))] == 2  # "idle" has a limit, nothing to do
    assert readings[("kiq_group_jobs_waiting", (("queue", "default"),))] == 4
    assert readings[("kiq_group_jobs_waiting", (("queue", "low"),))] == 1
    assert readings[("kiq_group_jobs_running", (("queue", "low"),))] == 0
