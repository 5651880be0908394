"""``perform_later`` from Python: the payload Rails' Sidekiq adapter pushes, written to a real Redis, sync and
asyncio; ``set`` options; the wrapper and Rails settings; refusals that write nothing."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import redis

import kiq
from kiq.api import Queue, ScheduledSet
from kiq.plugins import activejob
from kiq.plugins.activejob import RAILS_WRAPPER, SIDEKIQ_WRAPPER, ActiveJobError, job


def queued(r: redis.Redis, queue: str = "default") -> dict[str, object]:
    (raw,) = r.lrange(f"queue:{queue}", 0, -1)
    return json.loads(raw)


def test_perform_later_pushes_the_rails_adapters_payload(config: kiq.Config, r: redis.Redis) -> None:
    before = time.time()
    jid = activejob.perform_later("ReportJob", 7, "x", when=date(2026, 11, 25), queue="reports")
    payload = queued(r, "reports")
    envelope = payload["args"][0]  # type: ignore[index]
    assert payload["jid"] == jid and payload["class"] == RAILS_WRAPPER and payload["wrapped"] == "ReportJob"
    assert (payload["queue"], payload["retry"]) == ("reports", True) and "at" not in payload
    assert set(envelope) == {"job_class", "job_id", "provider_job_id", "queue_name", "priority", "arguments",
                             "executions", "exception_executions", "locale", "timezone", "enqueued_at"}  # fmt: skip
    assert uuid.UUID(envelope["job_id"]).version == 4
    when = {"_aj_serialized": "ActiveJob::Serializers::DateSerializer", "value": "2026-11-25"}
    assert envelope["arguments"] == [7, "x", {"when": when, "_aj_ruby2_keywords": ["when"]}]
    assert (envelope["queue_name"], envelope["priority"], envelope["executions"]) == ("reports", None, 0)
    assert (envelope["locale"], envelope["timezone"], envelope["provider_job_id"]) == ("en", "UTC", None)
    enqueued = datetime.fromisoformat(envelope["enqueued_at"]).timestamp()
    assert before - 1 <= enqueued <= time.time() + 1 and envelope["enqueued_at"].endswith("Z")


def test_set_schedules_with_wait_or_wait_until_and_carries_priority_and_options(
    config: kiq.Config, r: redis.Redis
) -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    job("ReportJob").set(wait_until=at, priority=5, queue="reports", retry=3, locale="de").perform_later(1)
    before = time.time()
    job("ReportJob").set(wait=timedelta(minutes=5)).perform_later(2)
    scheduled = {entry.item["args"][0]["arguments"][0]: entry for entry in ScheduledSet(config=config)}
    first, second = scheduled[1], scheduled[2]
    assert first.score == at.timestamp() and first.item["retry"] == 3 and first.item["queue"] == "reports"
    assert first.item["args"][0]["priority"] == 5 and first.item["args"][0]["locale"] == "de"
    assert first.item["args"][0]["scheduled_at"] == "2030-01-01T00:00:00.000000Z"
    assert before + 300 <= second.score <= time.time() + 300


def test_asyncio_perform_later_pushes_the_same_payload(config: kiq.Config, r: redis.Redis) -> None:
    async def enqueue() -> str | None:
        return await job("ReportJob", config).set(queue="reports").aio.perform_later(Decimal("2.5"), note="n")

    jid = asyncio.run(enqueue())
    payload = queued(r, "reports")
    assert payload["jid"] == jid and payload["wrapped"] == "ReportJob"
    assert payload["args"][0]["arguments"][0] == {  # type: ignore[index]
        "_aj_serialized": "ActiveJob::Serializers::BigDecimalSerializer",
        "value": "2.5",
    }


def test_the_wrapper_and_rails_settings(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin("activejob")
    config.activejob_wrapper = SIDEKIQ_WRAPPER
    config.activejob_rails = "6.1"
    activejob.perform_later("ReportJob", Decimal("2.5"))
    payload = queued(r)
    assert payload["class"] == SIDEKIQ_WRAPPER and payload["args"][0]["arguments"] == ["2.5"]  # type: ignore[index]
    with pytest.raises(kiq.ConfigError, match="activejob_wrapper"):
        config.activejob_wrapper = "MyWrapper"


def test_without_the_plugin_its_environment_variables_still_apply(
    config: kiq.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a pushing process need not enable the plugin; KIQ_ACTIVEJOB_RAILS must not be ignored in silence there
    monkeypatch.setenv("KIQ_ACTIVEJOB_RAILS", "6.1")
    activejob.perform_later("ReportJob", Decimal("2.5"))
    assert queued(r)["args"][0]["arguments"] == ["2.5"]  # type: ignore[index]
    monkeypatch.setenv("KIQ_ACTIVEJOB_RAILS", "5")
    with pytest.raises(kiq.ConfigError, match="KIQ_ACTIVEJOB_RAILS='5'"):
        activejob.perform_later("ReportJob", 1)


def test_the_dashboard_api_shows_the_wrapped_class_and_decoded_arguments(config: kiq.Config) -> None:
    activejob.perform_later("ReportJob", date(2026, 1, 2), when=Decimal("1"))
    (record,) = Queue("default", config=config)
    assert record.display_class == "ReportJob"
    assert record.display_args == record.args  # the plugin is not enabled in this config
    config.add_plugin("activejob")
    assert record.display_args == [date(2026, 1, 2), {"when": Decimal("1")}]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: activejob.perform_later("ReportJob", datetime(2026, 1, 2)), ActiveJobError, "has no time zone"),
        (lambda: activejob.perform_later("ReportJob", object()), ActiveJobError, r"args\[0\]: object"),
        (lambda: activejob.perform_later(""), kiq.InvalidJobError, "name a Rails job class by its constant"),
        (lambda: job("ReportJob").set(wait=1, wait_until=2).perform_later(), ValueError, "wait or wait_until"),
        (lambda: job("ReportJob").set(wait_until=datetime(2030, 1, 1)).perform_later(), ValueError, "no time zone"),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(
    config: kiq.Config, r: redis.Redis, call: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]
    assert r.dbsize() == 0
