"""Expiring jobs at the push: ``expires_in`` becomes an absolute ``expires_at`` in the payload, counted from when the
job is due, kept by later pushes of the same job; wrong values are refused where they are pushed."""

from __future__ import annotations

import json
import time

import pytest
import redis

import kiq
from tests.jobs.expiry import Quote


@pytest.fixture
def config(config: kiq.Config) -> kiq.Config:
    config.add_plugin("expiry")
    return config


def test_expires_in_becomes_an_absolute_deadline_in_the_payload(config: kiq.Config, r: redis.Redis) -> None:
    before = time.time()
    Quote.set(expires_in=30).perform_async(1)
    job = json.loads(r.lindex("queue:default", 0))
    assert before + 30 <= job["expires_at"] <= time.time() + 30
    assert job["expires_in"] == 30


def test_a_scheduled_job_expires_counting_from_when_it_is_due(config: kiq.Config, r: redis.Redis) -> None:
    Quote.perform_in(600, 1)
    ((payload, at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(payload)["expires_at"] == pytest.approx(at + 60)


def test_a_job_pushed_again_keeps_its_deadline(config: kiq.Config, r: redis.Redis) -> None:
    """What the poller does with a due scheduled job or a retry: the deadline of the first push stands."""
    Quote.perform_async(1)
    job = json.loads(r.rpop("queue:default"))
    kiq.Client(config).push(job)
    assert json.loads(r.rpop("queue:default"))["expires_at"] == job["expires_at"]


def test_a_job_without_expires_in_gets_no_deadline(config: kiq.Config, r: redis.Redis) -> None:
    Quote.set(expires_in=None).perform_async(1)
    assert "expires_at" not in json.loads(r.lindex("queue:default", 0))


@pytest.mark.parametrize("value", ["30", 0, -1, True])
def test_a_wrong_expires_in_is_refused_at_the_push(config: kiq.Config, r: redis.Redis, value: object) -> None:
    with pytest.raises(kiq.InvalidJobError, match=r"option 'expires_in' must be a number of seconds > 0, got"):
        Quote.set(expires_in=value).perform_async(1)
    assert r.dbsize() == 0


def test_a_misspelt_option_is_refused_with_a_did_you_mean(config: kiq.Config) -> None:
    with pytest.raises(kiq.ConfigError, match="unknown job option 'expire_in' \\(did you mean 'expires_in'\\?\\)"):
        Quote.set(expire_in=60).perform_async(1)
