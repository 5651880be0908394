"""Times in the listings carry their zone: local time by default, UTC with ``--utc``; JSON keeps epoch seconds."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import pytest
import redis

from tests.cli.helpers import Cli, failed_json, job_json

TOKYO = ZoneInfo("Asia/Tokyo")  # JST all year (no daylight saving time), so the expected zone name is fixed


@pytest.fixture
def in_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time zone is Tokyo's for the test."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def shown(timestamp: float, zone: datetime.tzinfo) -> str:
    return datetime.datetime.fromtimestamp(timestamp, zone).strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.usefixtures("in_tokyo")
def test_listings_show_local_time_with_its_zone_or_utc(cli: Cli, r: redis.Redis) -> None:
    runs_at = float(int(time.time()) + 3600)
    r.zadd("schedule", {job_json("later"): runs_at})
    died_at = float(int(time.time()) - 120)
    r.zadd("dead", {failed_json("gone"): died_at})
    r.zadd("retry", {failed_json("again"): runs_at})

    assert f"{shown(runs_at, TOKYO)} JST (in 59m)" in cli("scheduled")
    assert f"{shown(runs_at, datetime.UTC)} UTC (in 59m)" in cli("scheduled", "--utc")
    assert f"{shown(died_at, TOKYO)} JST (2m ago)" in cli("dead")
    assert f"{shown(runs_at, datetime.UTC)} UTC (in 59m)" in cli("retries", "--utc")
    assert [job["score"] for job in cli.json("scheduled", "--utc")] == [runs_at]  # JSON: epoch seconds


@pytest.mark.usefixtures("in_tokyo")
def test_a_process_start_shows_its_zone(cli: Cli, r: redis.Redis) -> None:
    identity = "box:42:abcdef123456"
    started_at = float(int(time.time()) - 3600)
    info = {"identity": identity, "hostname": "box", "pid": 42, "concurrency": 5, "started_at": started_at}
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps(info), "busy": 0, "beat": time.time(), "quiet": "false"})
    r.expire(identity, 60)
    assert f"{shown(started_at, TOKYO)} JST (1h ago)" in cli("processes")
    assert f"{shown(started_at, datetime.UTC)} UTC (1h ago)" in cli("processes", "--utc")
    assert cli.json("processes")[0]["started_at"] == started_at
