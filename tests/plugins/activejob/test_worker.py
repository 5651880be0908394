"""ActiveJob payloads in a kiq worker's processor (real Redis, the real Processor): golden fixtures of the Sidekiq
7.3+/8 ``Sidekiq::ActiveJob::Wrapper`` envelope run the registered job; what cannot be decoded fails into retry
with a clear error and the envelope kept; the ``kiq_unwrap_job`` hook's failures are the job's.

The fixtures were written by hand from Sidekiq 8.1's lib/active_job/queue_adapters/sidekiq_adapter.rb (``class``
``Sidekiq::ActiveJob::Wrapper``, ``wrapped`` and ``queue`` set, ``args`` = ``[job.serialize]``; Sidekiq 8's integer
millisecond ``created_at``/``enqueued_at``) and Rails 7.1+'s ``ActiveJob::Core#serialize`` (``scheduled_at``,
nanosecond ``enqueued_at``, a TimeWithZone's ``time_zone``, the BigDecimal and Range serializers).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import kiq
import kiq.testing
from kiq.api import RetrySet
from kiq.plugins import activejob
from kiq.plugins.activejob import SIDEKIQ_WRAPPER, Envelope, GlobalID, Symbol
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.jobs.activejob import QUEUE, runs
from tests.support import Unit, WorkerProcess, wait_until

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def config(config: kiq.Config) -> kiq.Config:
    config.add_plugin("activejob")
    return config


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text().strip()


def process(config: kiq.Config, payload: str) -> Unit:
    """One payload through a real processor of ``config`` (in this thread), as a worker runs a fetched job."""
    unit = Unit(payload, QUEUE)
    Processor(config, None, threading.Event(), RedisOutage(config), "test-processor").process(unit)  # type: ignore[arg-type]
    return unit


def test_the_sidekiq_8_wrapper_envelope_runs_the_wrapped_job_with_decoded_arguments(config: kiq.Config) -> None:
    unit = process(config, fixture("sidekiq8_rails72.json"))
    assert unit.acked == 1
    (run,) = runs(config)
    berlin = ZoneInfo("Europe/Berlin")
    assert run["args"] == [
        7,
        "x",
        Decimal("12.3456789012345678901"),
        datetime(2026, 11, 25, 12, 30, 15, 123456, tzinfo=berlin),
        timedelta(minutes=90),
        {"owner": GlobalID("shop", "Admin::User", "3/4", {"tenant": "eu"})},
    ]
    assert run["args"][3].tzinfo == berlin and type(run["args"][2]) is Decimal
    assert run["payload_kwargs"] == {"when": date(2026, 12, 1)}
    envelope = run["active_job"]
    assert envelope == Envelope(json.loads(fixture("sidekiq8_rails72.json"))["args"][0], "2b2c9d0e51f4a6b7c8d9e0f1")
    assert (envelope.job_class, envelope.job_id, envelope.provider_job_id) == (
        "ReportJob", "8e2f4c8a-5d4b-4f1e-9a51-2c3b7d0e6f19", "2b2c9d0e51f4a6b7c8d9e0f1"
    )  # fmt: skip
    assert (envelope.queue_name, envelope.priority, envelope.executions, envelope.locale, envelope.timezone) == (
        QUEUE, 5, 2, "de", "Europe/Berlin"
    )  # fmt: skip
    assert envelope.exception_executions == {"[Net::ReadTimeout]": 2}
    assert (envelope.enqueued_at, envelope.scheduled_at) == ("2026-11-25T09:16:38.123456789Z", None)
    assert run["class"] == SIDEKIQ_WRAPPER


def test_a_scheduled_sidekiq_7_3_envelope_decodes_symbols_indifferent_hashes_and_modules(config: kiq.Config) -> None:
    process(config, fixture("sidekiq73_scheduled.json"))
    (run,) = runs(config)
    assert run["args"] == ["nightly", {"e": 1}, "Billing::Invoice"]
    assert [type(value) for value in run["args"]] == [Symbol, dict, str]
    assert run["payload_kwargs"] is None
    assert run["active_job"].scheduled_at == "2026-11-25T10:16:38.000000000Z"


def test_an_unknown_serializer_fails_the_job_into_retry_with_the_envelope_kept(config: kiq.Config) -> None:
    payload = fixture("rails71_range.json")
    unit = process(config, payload)
    assert unit.acked == 1 and runs(config) == []
    (entry,) = RetrySet(config=config)
    assert entry["args"] == json.loads(payload)["args"]  # as Rails wrote it: a Rails worker can still run it
    assert entry["class"] == "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
    assert entry["error_class"] == "kiq.plugins.activejob.errors.ActiveJobError"
    assert entry["error_message"].startswith(
        "arguments[1]: kiq has no decoder for the ActiveJob serializer 'ActiveJob::Serializers::RangeSerializer' "
        "(it decodes BigDecimalSerializer, DateSerializer, "
    )
    assert entry.display_args == entry["args"]  # shown as stored: it cannot be decoded


def test_an_envelope_naming_an_unregistered_job_fails_into_retry(config: kiq.Config) -> None:
    payload = json.loads(fixture("sidekiq73_scheduled.json"))
    payload["args"][0]["job_class"] = "NoSuchJob"
    process(config, json.dumps(payload))
    (entry,) = RetrySet(config=config)
    assert entry["error_class"] == "kiq.errors.UnknownJobError"
    assert "no job is registered as 'NoSuchJob'" in entry["error_message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "must have one argument, the ActiveJob envelope with a 'job_class' string; got args []"),
        ([{"arguments": []}], "must have one argument, the ActiveJob envelope"),
        ([{"job_class": "ReportJob", "arguments": {"a": 1}}], "the envelope's 'arguments' must be a list, got dict"),
        (
            [{"job_class": "ReportJob", "arguments": [{"_aj_serialized": "ActiveJob::Serializers::DateSerializer"}]}],
            "arguments[0]: a malformed ActiveJob::Serializers::DateSerializer value",
        ),
    ],
)
def test_a_malformed_envelope_fails_into_retry_naming_what_is_wrong(
    config: kiq.Config, args: list[Any], message: str
) -> None:
    payload = {"class": SIDEKIQ_WRAPPER, "wrapped": "ReportJob", "queue": QUEUE, "args": args, "jid": "a" * 24}
    process(config, json.dumps(payload))
    (entry,) = RetrySet(config=config)
    assert message in entry["error_message"] and entry["args"] == args


class BrokenUnwrapper:
    @kiq.hookimpl
    def kiq_unwrap_job(self, job: dict[str, Any]) -> str | None:
        raise RuntimeError(f"cannot unwrap {job['class']}")


def test_a_failing_unwrap_hook_fails_that_job_into_retry_not_the_worker(config: kiq.Config) -> None:
    config.add_plugin(BrokenUnwrapper())
    payload = json.dumps({"class": "Some::Wrapper", "args": [1], "queue": QUEUE, "jid": "b" * 24, "retry": True})
    unit = process(config, payload)
    assert unit.acked == 1
    (entry,) = RetrySet(config=config)
    assert (entry["error_class"], entry["error_message"]) == ("RuntimeError", "cannot unwrap Some::Wrapper")
    assert entry["args"] == [1]


def test_without_the_plugin_a_wrapper_payload_is_an_unknown_class(config: kiq.Config) -> None:
    plain = kiq.Config(redis_url=config.redis_url)
    process(plain, fixture("sidekiq73_scheduled.json"))
    (entry,) = RetrySet(config=config)
    assert "no job is registered as 'Sidekiq::ActiveJob::Wrapper'" in entry["error_message"]


def test_an_envelope_for_python_decodes_back_to_the_values_sent(config: kiq.Config) -> None:
    """perform_later's envelope, run by a kiq worker: a Python service can enqueue for either side."""
    from kiq.plugins.activejob import job

    when = datetime(2026, 11, 25, 9, 16, 38, 123456, tzinfo=UTC)
    payload = job("ReportJob", config).payload((Decimal("1.5"), when, Symbol("s"), [date(2026, 1, 2)]), {"n": 1})
    process(config, json.dumps(payload))
    (run,) = runs(config)
    assert run["args"] == [Decimal("1.5"), when, "s", [date(2026, 1, 2)]]
    assert run["payload_kwargs"] == {"n": 1}


def test_an_async_wrapped_job_runs_on_the_worker_event_loop(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    payload = json.loads(fixture("sidekiq8_rails72.json"))
    payload["wrapped"] = payload["args"][0]["job_class"] = "AsyncReportJob"
    e2e_config.redis.lpush(f"queue:{QUEUE}", json.dumps(payload))
    worker = start_worker("-r", "tests.jobs.activejob", "-q", QUEUE, env={"KIQ_PLUGINS": "activejob"})
    (run,) = wait_until(lambda: runs(e2e_config), 30, message=f"the async job to run:\n{worker.output()}")
    assert run["args"][:2] == [7, "x"] and run["active_job"].job_class == "AsyncReportJob"


def test_metrics_count_activejob_payloads_under_the_wrapped_class(config: kiq.Config) -> None:
    processor = Processor(config, None, threading.Event(), RedisOutage(config), "test-processor")  # type: ignore[arg-type]
    processor.process(Unit(fixture("sidekiq8_rails72.json"), QUEUE))
    processor.process(Unit(fixture("rails71_range.json"), QUEUE))  # fails: counted too
    assert processor.metrics is not None
    assert {name: counts[0] for name, counts in processor.metrics.counts.items()} == {"ReportJob": 1}  # 1 failure
    assert sum(processor.metrics.counts["ReportJob"][2:]) == 1  # 1 success, in the histogram


def test_the_fake_testing_mode_drains_activejob_payloads_through_the_plugin(config: kiq.Config) -> None:
    with kiq.testing.fake() as fake:
        activejob.perform_later("ReportJob", date(2026, 11, 25), queue=QUEUE, note="n")
        assert fake.drain() == 1
    (run,) = runs(config)
    assert run["args"] == [date(2026, 11, 25)] and run["payload_kwargs"] == {"note": "n"}


def test_an_annotated_perform_gets_the_decoded_values_and_keyword_arguments(config: kiq.Config) -> None:
    payload = activejob.job("TypedReportJob", config).payload((Decimal("2.50"), date(2026, 1, 2)), {"mode": "fast"})
    unit = process(config, json.dumps(payload))
    assert unit.acked == 1 and list(RetrySet(config=config)) == []
    (run,) = runs(config)
    assert run["args"] == [Decimal("2.50"), date(2026, 1, 2)] and run["kwargs"] == {"mode": "fast"}
