"""What the limiters in use look like, for operators: ``limiter_states()`` and ``kiq limiters`` list every limiter
used on the Redis with its limit, what is taken now and how many jobs it rescheduled."""

from __future__ import annotations

import json

import pytest

import kiq
from kiq.cli import main
from kiq.plugins.limiter import LimiterState, bucket, concurrent, limiter_states, window


def test_every_limiter_used_is_listed_with_what_is_taken(config: kiq.Config) -> None:
    config.redis.hset("kiq:limiter:overrated", "window:stripe", 3)
    with concurrent("erp", 2, lock_timeout=60):
        window("stripe", 100, 1.0).acquire()
        for _ in range(3):
            bucket("mailer", 50, 60.0).acquire()
        states = limiter_states(config)
    assert states == [
        LimiterState("bucket", "mailer", 50, "50 per 60 s", 3, 0),
        LimiterState("concurrent", "erp", 2, "2 at once", 1, 0),
        LimiterState("window", "stripe", 100, "100 per 1 s", 1, 3),
    ]
    assert [state.in_use for state in limiter_states(config)] == [3, 0, 1]  # the concurrent slot was given back


def test_kiq_limiters_prints_a_table_or_json(config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> None:
    assert config.redis_url is not None
    assert main(["limiters", "--redis-url", config.redis_url]) == 0
    assert "no limiter has been used" in capsys.readouterr().out
    with concurrent("erp", 2):
        assert main(["limiters", "--redis-url", config.redis_url]) == 0
        table = capsys.readouterr().out.splitlines()
        assert main(["limiters", "--redis-url", config.redis_url, "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
    assert table[0].split() == ["KIND", "NAME", "LIMIT", "IN", "USE", "OVERRATED"]
    assert table[1].split() == ["concurrent", "erp", "2", "at", "once", "1", "0"]
    assert listed == [{"kind": "concurrent", "name": "erp", "limit": 2, "rate": "2 at once", "in_use": 1,
                       "overrated": 0}]  # fmt: skip
