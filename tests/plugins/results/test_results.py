"""Results run here by the real Processor (and event loop) on a real Redis: a sync and an async job's return value
come back by jid, from sync and asyncio code, waiting for it if asked; a value that is not strict JSON is an error
recorded as the job's result (not retried, logged as failed); a job that died or was dropped has an error for a
result; nothing is kept unless asked, and a wrong ``result_ttl`` is refused at the push."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest
import redis

import kiq
from kiq.plugins.results import NoResult, ResultError, ResultsPlugin, aio, result
from tests.jobs.results import VALUES, Dies, Price, ReturnsThis, Unkept, async_price
from tests.support import run_on_event_loop
from tests.tracking_support import work_off


def test_a_sync_jobs_return_value_comes_back_by_jid(config: kiq.Config, r: redis.Redis) -> None:
    jid = Price.perform_async(4)
    assert jid is not None
    with pytest.raises(NoResult, match=f"no result for job {jid}"):
        result(jid)
    work_off(config)
    assert result(jid) == {"number": 4, "price": 6.0, "tags": ["a", "b"]}
    assert 0 < r.pttl(f"kiq:result:{jid}") <= 60_000
    assert json.loads(r.get(f"kiq:result:{jid}")) == {"value": {"number": 4, "price": 6.0, "tags": ["a", "b"]}}


def test_an_async_jobs_return_value_comes_back_by_jid_also_from_asyncio_code(config: kiq.Config) -> None:
    jid = async_price.perform_async(9)
    assert jid is not None
    (unit,) = run_on_event_loop(config, [config.redis.rpop("queue:default")])
    assert unit.acked == 1
    assert result(jid) == [9, "async"]

    async def read() -> object:
        try:
            return await aio.result(jid, wait=1)
        finally:
            await kiq.AsyncClient(config).close()

    assert asyncio.run(read()) == [9, "async"]


def test_a_reader_waits_for_the_result_when_asked(config: kiq.Config) -> None:
    jid = Price.perform_async(1)
    assert jid is not None
    runner = threading.Timer(0.2, work_off, [config])
    runner.start()
    started = time.monotonic()
    assert result(jid, wait=10)["number"] == 1
    assert time.monotonic() - started < 5
    runner.join()
    with pytest.raises(NoResult):
        result("0" * 24, wait=0.1)
    with pytest.raises(ValueError, match="wait must be"):
        result(jid, wait=-1)


@pytest.mark.parametrize("name", ["set", "tuple", "nan", "datetime", "bytes", "int key", "deep"])
def test_a_value_that_is_not_strict_json_is_an_error_recorded_as_the_result(
    config: kiq.Config, r: redis.Redis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "kiq")
    jid = ReturnsThis.perform_async(name)
    assert jid is not None
    assert work_off(config) == 1
    with pytest.raises(ResultError, match=f"ResultsReturnsThis {jid} returned .* which is not strict JSON"):
        result(jid)
    assert r.zcard("retry") == 0  # running it again would return the same: not retried
    assert "not strict JSON" in caplog.text and "fail: ResultError" in caplog.text  # logged as failed


def test_strict_json_values_come_back_equal(config: kiq.Config) -> None:
    jid = ReturnsThis.perform_async("json")
    work_off(config)
    assert result(str(jid)) == VALUES["json"]


def test_a_job_that_died_has_its_death_for_a_result(config: kiq.Config) -> None:
    jid = Dies.perform_async()
    work_off(config)
    with pytest.raises(ResultError, match="died: RuntimeError: no value today"):
        result(str(jid))


def test_a_job_dropped_unrun_has_the_reason_for_a_result(config: kiq.Config) -> None:
    config.add_plugin("expiry")
    jid = Price.set(expires_in=0.01).perform_async(1)
    time.sleep(0.02)  # past its deadline
    work_off(config)
    with pytest.raises(ResultError, match="dropped: expired"):
        result(str(jid))


def test_nothing_is_kept_unless_asked_and_the_setting_keeps_every_value(config: kiq.Config, r: redis.Redis) -> None:
    unkept = Unkept.perform_async()
    refused = Price.set(result_ttl=False).perform_async(1)
    work_off(config)
    assert r.keys("kiq:result:*") == []
    config.job_result_ttl = 30
    kept = Unkept.perform_async()
    work_off(config)
    assert result(str(kept)) == 7 and 0 < r.ttl(f"kiq:result:{kept}") <= 30
    for jid in (unkept, refused):
        with pytest.raises(NoResult):
            result(str(jid))


def test_without_the_plugin_in_the_worker_nothing_is_kept(config: kiq.Config, r: redis.Redis) -> None:
    bare = kiq.Config(redis_url=config.redis_url)  # no plugin: its chains are empty
    Price.set(config=bare).perform_async(1)
    assert work_off(bare) == 1
    assert r.keys("kiq:result:*") == []
    bare.redis.close()


@pytest.mark.parametrize("ttl", ["60", -1, True, float("inf")])
def test_a_wrong_result_ttl_is_refused_at_the_push(config: kiq.Config, r: redis.Redis, ttl: object) -> None:
    with pytest.raises(kiq.InvalidJobError, match="result_ttl"):
        Price.set(result_ttl=ttl).perform_async(1)
    with pytest.raises(kiq.ConfigError, match="did you mean 'result_ttl'"):
        Price.set(result_tll=60).perform_async(1)
    assert r.llen("queue:default") == 0


def test_the_plugin_is_found_by_its_entry_point_name() -> None:
    assert isinstance(kiq.Config(plugins=["results"]).plugins.find(ResultsPlugin), ResultsPlugin)
