"""kiq.ext.hold_write: a plugin's write Redis refused, held by the worker's outcome keeper and made once Redis takes
writes. The refusal is real: a redis-server of the test's own at ``maxmemory`` with ``noeviction``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
import kiq.ext
from kiq.failures import TRANSIENT
from kiq.server.outcomes import OutcomeKeeper, RedisOutage
from tests.outage_support import config_at_maxmemory

JOB = {"class": "Report", "jid": "0123456789abcdef01234567", "args": [1]}


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[kiq.Config, redis.Redis]]:
    """A config on a redis-server of its own that refuses every write needing memory."""
    with config_at_maxmemory(tmp_path / "redis") as full:
        yield full


def write_refused(config: kiq.Config) -> BaseException:
    """What a plugin's write meets on this Redis."""
    try:
        config.redis.hset("droplog", JOB["jid"], "expired")
    except TRANSIENT as refusal:
        return refusal
    raise AssertionError("Redis took the write")


def test_a_held_write_is_made_once_redis_takes_writes(full: tuple[kiq.Config, redis.Redis]) -> None:
    config, admin = full
    keeper = OutcomeKeeper(config, RedisOutage(config))
    refusal = write_refused(config)
    write = lambda: config.redis.hset("droplog", JOB["jid"], "expired")  # noqa: E731
    assert kiq.ext.hold_write(write, refusal, config=config, what="the drop log entry was not written", job=JOB)
    assert keeper.held == 1 and not keeper.wait(lambda: False, 0.5)  # still refused: still held
    admin.config_set("maxmemory", 0)
    assert keeper.wait(lambda: False, 30)
    assert admin.hget("droplog", JOB["jid"]) == "expired" and keeper.held == 0


def test_a_write_still_refused_at_a_stop_is_one_error_line(
    full: tuple[kiq.Config, redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    config, _ = full
    keeper = OutcomeKeeper(config, RedisOutage(config))
    refusal = write_refused(config)
    write = lambda: config.redis.hset("droplog", JOB["jid"], "expired")  # noqa: E731  # still refused at the stop
    assert kiq.ext.hold_write(write, refusal, config=config, what="the drop log entry was not written", job=JOB)
    with caplog.at_level(logging.ERROR, logger="kiq"):
        assert keeper.give_up() == 1
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert lines == [
        f"unwritten job outcome: the drop log entry was not written for Report jid={JOB['jid']} (its own Redis write "
        f'was refused); job: {{"class":"Report","jid":"{JOB["jid"]}","args":[1]}}'
    ]


def test_outside_a_worker_or_for_an_error_redis_does_not_get_over_nothing_holds_it(config: kiq.Config) -> None:
    refusal = redis.ConnectionError("unreachable")
    assert not kiq.ext.hold_write(lambda: None, refusal, config=config, what="x")  # no keeper: a client, a web request
    keeper = OutcomeKeeper(config, RedisOutage(config))
    assert not kiq.ext.hold_write(lambda: None, redis.ResponseError("WRONGTYPE"), config=config, what="x")
    assert keeper.held == 0
