"""The push side: what is refused before anything is written (no keys, nothing to encrypt, a named field given by
position, an option of the wrong form, a value that is not JSON), and what other plugins keep of an encrypted job
(tracking's params) is ``[encrypted]`` from the task's creation to the job's end."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kiq
import kiq.plugins.otel as otel
from kiq.api import Queue, Workers, shown_job
from kiq.plugins.tracking import Tracker
from tests.jobs.encryption import RECEIVED, ChargeCard, Enroll
from tests.tracking_support import work_off

CARD = "4242-4242-4242-4242"


@pytest.fixture
def encrypting(config: kiq.Config) -> kiq.Config:
    config.add_plugin("encryption")
    config.encryption_keys = {"1": base64.b64encode(os.urandom(32)).decode()}
    return config


class Bare(kiq.Job):
    kiq_name = "EncBare"
    kiq_options = {"encrypt": True}

    def perform(self, *args: Any) -> None: ...


@pytest.mark.parametrize(
    ("push", "error"),
    [
        (lambda: Bare.perform_async(), "EncBare: encrypt: True encrypts the last positional argument, and the job has"),
        (lambda: Enroll.perform_async(7, "078-05-1120"), "'ssn' is to be encrypted (encrypt: ['ssn', 'card']) but is"),
        (lambda: Bare.set(encrypt="yes").perform_async(1), "the encrypt option must be true (the last positional"),
        (lambda: Bare.set(encrypt=[]).perform_async(1), 'or a list of keyword argument names, e.g. ["ssn"]; got []'),
        (lambda: ChargeCard.perform_async(7, {CARD}), "Job arguments to EncChargeCard must be native JSON types"),
        (lambda: ChargeCard.perform_async(7, "\udc80"), "the encrypted args[-1] holds a lone surrogate"),
    ],
    ids=["no-argument", "by-position", "option-text", "option-empty", "not-json", "surrogate"],
)
def test_a_push_that_cannot_be_encrypted_is_refused_and_writes_nothing(
    encrypting: kiq.Config, r: redis.Redis, push: Any, error: str
) -> None:
    with pytest.raises((kiq.InvalidJobError, kiq.JobArgumentError)) as refused:
        push()
    assert error in str(refused.value)
    assert r.dbsize() == 0


def test_a_push_without_keys_is_refused_saying_which_setting_to_set(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin("encryption")
    with pytest.raises(
        kiq.ConfigError, match="EncChargeCard: its arguments are to be encrypted, and no encryption_keys"
    ):
        ChargeCard.perform_async(7, CARD)
    assert r.dbsize() == 0
    with pytest.raises(kiq.ConfigError, match="the encryption plugin needs its keys: set KIQ_ENCRYPTION_KEYS"):
        config.plugins.hook.kiq_check(config=config)
    ChargeCard.set(encrypt=False).perform_async(7, "not secret")  # nothing to encrypt: no key needed
    assert r.llen("queue:default") == 1


def test_a_deep_value_is_refused_or_sealed_but_never_pushed_in_clear(encrypting: kiq.Config, r: redis.Redis) -> None:
    deep: Any = "4242"
    for _ in range(5000):
        deep = [deep]
    try:
        ChargeCard.perform_async(7, deep)
    except (RecursionError, kiq.JobArgumentError):
        assert r.dbsize() == 0
    else:
        assert b"4242" not in redis.Redis.from_url(str(encrypting.redis_url)).lindex("queue:default", 0)  # type: ignore[operator]


def test_tracking_keeps_encrypted_arguments_as_encrypted(encrypting: kiq.Config, tracker: Tracker) -> None:
    task_id = tracker.create_task(ChargeCard, [[7, CARD]])
    enroll_task = tracker.create_task(Enroll, [kiq.Call(8, ssn="078-05-1120", note="seen")])
    assert work_off(encrypting) == 2
    tracker.writer.flush()
    assert [json.loads(entry)[1] for entry in encrypting.redis.lrange(RECEIVED, 0, -1)] == [[7, CARD], [8]]
    (charge,) = tracker.task(task_id)["events"]  # type: ignore[index]
    (enroll,) = tracker.task(enroll_task)["events"]  # type: ignore[index]
    assert charge["status"] == "finished" and charge["params"] == [7, "[encrypted]"]
    assert enroll["params"] == {"args": [8], "kwargs": {"ssn": "[encrypted]", "note": "seen"}}


def test_a_running_jobs_arguments_show_as_encrypted(encrypting: kiq.Config, r: redis.Redis) -> None:
    ChargeCard.perform_async(7, CARD)
    payload = r.lindex("queue:default", 0)
    r.sadd("processes", "host:1:0123456789ab")  # what a worker's heartbeat writes while the job runs
    r.hset("host:1:0123456789ab:work", "tid", json.dumps({"queue": "default", "payload": payload, "run_at": 1}))
    (work,) = Workers(encrypting)
    assert work.args == [7, "[encrypted]"] and work.arguments_line == '[7, "[encrypted]"]'


def test_opentelemetry_spans_hold_neither_the_value_nor_its_sealed_form(encrypting: kiq.Config) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    otel.instrument(encrypting, tracer_provider=provider)
    ChargeCard.perform_async(7, CARD)
    encrypting.encryption_keys = {"2": base64.b64encode(os.urandom(32)).decode()}  # version 1 is unknown now
    ChargeCard.perform_async(8, CARD)
    assert work_off(encrypting) == 2  # one ran; one failed into the retry set before the other layers ran
    provider.shutdown()
    recorded = [(span.name, dict(span.attributes or {}), [dict(e.attributes or {}) for e in span.events])
                for span in spans.get_finished_spans()]  # fmt: skip
    assert sorted(name for name, _, _ in recorded) == ["process default", "send default", "send default"]
    assert CARD not in str(recorded) and "kiq-enc" not in str(recorded)


def test_a_redaction_that_raises_is_reported_and_the_others_still_hide(encrypting: kiq.Config) -> None:
    errors: list[str] = []

    class Broken:
        @kiq.hookimpl
        def kiq_redact_job(self, job: dict[str, Any]) -> None:
            raise RuntimeError("this redaction is broken")

        @kiq.hookimpl
        def kiq_error(self, exc: BaseException) -> None:
            errors.append(str(exc))

    encrypting.add_plugin(Broken())
    ChargeCard.perform_async(7, CARD)
    (record,) = Queue("default", encrypting)
    assert record.display_args == [7, "[encrypted]"] and errors == ["this redaction is broken"]
    assert shown_job({"args": [1]}, kiq.Config()) == {"args": [1]}  # no plugin redacts: the payload itself
