"""Rails ActiveJob (Debian's ruby-activejob 6.1 over ruby-sidekiq 6.4.1) and kiq's ``activejob`` plugin, both ways.

tests/ruby/activejob.rb is both the Rails side's worker (``sidekiq -r``, queue ``aj_ruby``) and its client (it
``perform_later``s the stand-ins of tests/jobs/activejob.py onto ``aj_kiq``); kiq workers run those with the plugin.
Without Ruby, its sidekiq gem and ActiveJob these tests skip, unless KIQ_REQUIRE_SERVICES=1 (CI), where they fail.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

import kiq
from kiq.api import RetrySet
from kiq.payload import loads
from kiq.plugins.activejob import RAILS_WRAPPER, Envelope, GlobalID, Symbol, job

from .jobs.activejob import QUEUE, RUBY_QUEUE, runs
from .support import ROOT, WorkerProcess, missing_service
from .test_interop_ruby import RUBY_DIR, RubySidekiq, SidekiqInstall, find_sidekiq, heartbeating, wait_for

pytestmark = pytest.mark.slow

RUBY_RUNS = "interop:activejob:ruby:runs"  # what RailsEcho and FlakyReportJob record in Ruby (JSON)
WORKER_ARGS = ("-r", "tests.jobs.activejob", "-q", QUEUE)
WORKER_ENV = {"KIQ_PLUGINS": "activejob", "KIQ_POLL_INTERVAL": "0.2"}
# the core passes keyword arguments to perform once it has kiq.arguments (the payload's in-memory kwargs before)
CORE_KWARGS = importlib.util.find_spec("kiq.arguments") is not None

# What tests/ruby/activejob.rb's ARGUMENTS and keyword arguments become in Python.
FROM_RUBY = [
    7, 2.5, "x", None, True, [1, [2]],
    {"a": 1, "b": {"c": "d"}},
    {"e": 1},
    "sym",
    date(2026, 11, 25),
    datetime(2026, 11, 25, 9, 16, 38, 123456, tzinfo=UTC),
    datetime(2026, 11, 25, 10, 0, 0, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 11, 25, 12, 30, 15, tzinfo=timezone(timedelta(hours=1))),
    timedelta(minutes=90),
    "0.123456789012345678901e2",  # Rails 6.1 sends a BigDecimal as its string (7.0+: BigDecimalSerializer)
    "Account",
    GlobalID("kiqtest", "Account", "42"),
]  # fmt: skip
FROM_RUBY_TYPES = [int, float, str, type(None), bool, list, dict, dict, Symbol, date, datetime, datetime, datetime,
                   timedelta, str, str, GlobalID]  # fmt: skip
FROM_RUBY_KWARGS = {"when": date(2026, 12, 1), "mode": "fast"}


def ruby_activejob() -> SidekiqInstall:
    found = find_sidekiq()
    if isinstance(found, str):
        missing_service(found)
    probe = subprocess.run([found.ruby, "-e", 'require "active_job"'], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        missing_service(f"no ActiveJob for {found.ruby} (Debian: apt-get install ruby-activejob): {probe.stderr}")
    return found


@pytest.fixture(scope="module")
def install() -> SidekiqInstall:
    return ruby_activejob()


@pytest.fixture
def rails(e2e_config: kiq.Config, install: SidekiqInstall) -> Callable[..., Any]:
    """Runs tests/ruby/activejob.rb's client commands on the test Redis; returns its JSON answer."""
    env = {**os.environ, "REDIS_URL": str(e2e_config.redis_url)}

    def run(command: str, *params: Any) -> Any:
        done = subprocess.run([install.ruby, str(RUBY_DIR / "activejob.rb"), command, json.dumps(params)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, f"ruby activejob.rb {command} failed:\n{done.stderr}"
        return json.loads(done.stdout)

    return run


@pytest.fixture
def rails_worker(e2e_config: kiq.Config, install: SidekiqInstall, tmp_path: Any) -> Iterator[RubySidekiq]:
    """A real Sidekiq with ActiveJob loaded, running the Rails jobs of tests/ruby/activejob.rb."""
    url = str(e2e_config.redis_url)
    with heartbeating(
        RubySidekiq(install, url, tmp_path / "sidekiq.log", script="activejob.rb", queue=RUBY_QUEUE)
    ) as ruby:
        yield ruby


def ruby_runs(config: kiq.Config, count: int) -> list[dict[str, Any]] | None:
    found = [loads(raw) for raw in config.redis.lrange(RUBY_RUNS, 0, -1)]
    return found if len(found) >= count else None


def kiq_runs(config: kiq.Config, count: int) -> list[dict[str, Any]] | None:
    found = runs(config)
    return found if len(found) >= count else None


# -- Rails enqueues, kiq runs --------------------------------------------------------------------------------
def test_rails_perform_later_runs_in_kiq_with_every_argument_type(
    e2e_config: kiq.Config, rails: Callable[..., Any], start_worker: Callable[..., WorkerProcess]
) -> None:
    now = rails("perform_later")
    later = rails("perform_later", {"wait": 1})  # ActiveJob's set(wait:): Sidekiq's schedule set, kiq's poller
    assert e2e_config.redis.zcard("schedule") == 1
    stored = {loads(raw)["jid"]: raw for raw in e2e_config.redis.lrange(f"queue:{QUEUE}", 0, -1)}
    assert loads(stored[now["jid"]])["class"] == RAILS_WRAPPER

    worker = start_worker(*WORKER_ARGS, env=WORKER_ENV)
    done = {run["jid"]: run for run in wait_for(lambda: kiq_runs(e2e_config, 2), "kiq to run both jobs", worker)}
    assert set(done) == {now["jid"], later["jid"]}
    for enqueued in (now, later):
        run = done[enqueued["jid"]]
        assert run["args"] == FROM_RUBY
        assert [type(value) for value in run["args"]] == FROM_RUBY_TYPES
        assert run["args"][6] == {"a": 1, "b": {"c": "d"}} and isinstance(next(iter(run["args"][6]["b"])), Symbol)
        assert run["payload_kwargs"] == FROM_RUBY_KWARGS
        assert run["kwargs"] == (FROM_RUBY_KWARGS if CORE_KWARGS else {})
        envelope = run["active_job"]
        assert isinstance(envelope, Envelope)
        assert (envelope.job_class, envelope.job_id, envelope.provider_job_id) == (
            "ReportJob", enqueued["job_id"], enqueued["jid"]
        )  # fmt: skip
        assert (envelope.executions, envelope.locale, envelope.timezone) == (0, "en", "Europe/Berlin")
        assert run["class"] == RAILS_WRAPPER  # the in-memory payload keeps its class (its stored string is as is)


def test_a_python_failure_retries_with_the_envelope_kept_and_rails_can_run_the_retry_entry(
    e2e_config: kiq.Config, rails: Callable[..., Any], start_worker: Callable[..., WorkerProcess]
) -> None:
    enqueued = rails("perform_later", {"class": "FlakyReportJob"})
    (pushed,) = map(loads, e2e_config.redis.lrange(f"queue:{QUEUE}", 0, -1))
    worker = start_worker(*WORKER_ARGS, env=WORKER_ENV)

    entry = wait_for(lambda: RetrySet(config=e2e_config).find_job(enqueued["jid"]), "the retry entry", worker)
    assert entry["class"] == RAILS_WRAPPER and entry["wrapped"] == "FlakyReportJob"
    assert entry["args"] == pushed["args"]  # the envelope as Rails wrote it: Ruby can run it
    assert entry["error_class"] == "RuntimeError" and entry["retry_count"] == 0
    assert entry["error_message"] == "report failed in Python (17 arguments)"
    assert entry.display_class == "FlakyReportJob"
    assert entry.display_args == entry["args"]  # decoded only where the plugin is enabled
    e2e_config.add_plugin("activejob")
    assert entry.display_args[:3] == [7, 2.5, "x"] and entry.display_args[-1] == FROM_RUBY_KWARGS

    assert rails("execute_retry", enqueued["jid"]) == {"executed": RAILS_WRAPPER}
    (ruby_run,) = wait_for(lambda: ruby_runs(e2e_config, 1), "Rails to run the retry entry")
    assert (ruby_run["class"], ruby_run["job_id"], ruby_run["jid"]) == (
        "FlakyReportJob", enqueued["job_id"], enqueued["jid"]
    )  # fmt: skip
    assert ruby_run["args"][9] == {"type": "Date", "value": "2026-11-25"}
    assert ruby_run["kwargs"]["value"][":when"] == {"type": "Date", "value": "2026-12-01"}


# -- kiq enqueues, Rails runs ---------------------------------------------------------------------------------
TO_RUBY = [
    7, 2.5, "x", None, True, [1, [2]],
    {"a": 1, Symbol("b"): {"c": Symbol("d")}},
    Symbol("sym"),
    date(2026, 11, 25),
    datetime(2026, 11, 25, 9, 16, 38, 123456, tzinfo=UTC),
    datetime(2026, 11, 25, 10, 0, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    timedelta(minutes=90),
    Decimal("12.3456789012345678901"),
    GlobalID("kiqtest", "Account", "42"),
]  # fmt: skip
RUBY_SAW = [
    7, 2.5, "x", None, True, [1, [2]],
    {"type": "Hash", "value": {"a": 1, ":b": {"type": "Hash", "value": {"c": {"type": "Symbol", "value": "d"}}}}},
    {"type": "Symbol", "value": "sym"},
    {"type": "Date", "value": "2026-11-25"},
    {"type": "Time", "value": "2026-11-25T09:16:38.123456+00:00"},
    {"type": "Time", "value": "2026-11-25T10:00:00.000000+05:30"},
    {"type": "Duration", "value": 5400},
    "12.3456789012345678901",  # activejob_rails = "6.1": a Decimal goes as its string, as Rails 6.1 sends one
    {"type": "Account", "value": "42"},
]  # fmt: skip
RUBY_SAW_KWARGS = {"type": "Hash", "value": {":when": {"type": "Date", "value": "2026-12-01"}, ":note": "n"}}


def test_python_perform_later_of_every_type_runs_in_rails(e2e_config: kiq.Config, rails_worker: RubySidekiq) -> None:
    e2e_config.add_plugin("activejob")
    e2e_config.activejob_rails = "6.1"
    echo = job("RailsEcho", e2e_config)
    now = echo.set(queue=RUBY_QUEUE, priority=3).perform_later(*TO_RUBY, when=date(2026, 12, 1), note="n")
    later = echo.set(queue=RUBY_QUEUE, wait=timedelta(seconds=1)).perform_later(
        *TO_RUBY, when=date(2026, 12, 1), note="n"
    )
    from_asyncio = asyncio.run(echo.set(queue=RUBY_QUEUE).aio.perform_later(*TO_RUBY, when=date(2026, 12, 1), note="n"))
    assert e2e_config.redis.zcard("schedule") == 1

    done = {run["jid"]: run for run in wait_for(lambda: ruby_runs(e2e_config, 3), "Rails to run them", rails_worker)}
    assert set(done) == {now, later, from_asyncio}
    for run in done.values():
        assert run["class"] == "RailsEcho" and run["queue"] == RUBY_QUEUE and run["executions"] == 1
        assert run["args"] == RUBY_SAW
        assert run["kwargs"] == RUBY_SAW_KWARGS
    assert done[now]["priority"] == 3


def test_a_rails_failure_shows_decoded_in_kiqs_retry_set_and_kiqs_retry_runs_it_in_rails(
    e2e_config: kiq.Config, rails_worker: RubySidekiq
) -> None:
    e2e_config.add_plugin("activejob")
    jid = job("RailsFlaky", e2e_config).set(queue=RUBY_QUEUE).perform_later(date(2026, 11, 25), note=Symbol("n"))
    entry = wait_for(lambda: RetrySet(config=e2e_config).find_job(jid), "Rails' failure in the retry set", rails_worker)
    assert (entry["class"], entry["error_class"], entry["error_message"]) == (
        RAILS_WRAPPER, "RailsInteropError", "first attempt in Rails"
    )  # fmt: skip
    assert entry.display_class == "RailsFlaky" and entry.display_args == [date(2026, 11, 25), {"note": "n"}]

    assert entry.retry()  # kiq's API sends it back to its queue, where Rails runs it again
    (run,) = wait_for(lambda: ruby_runs(e2e_config, 1), "Rails to run the retried job", rails_worker)
    # executions counts ActiveJob's own retries (retry_on), not Sidekiq's: the retried envelope is the stored one
    assert (run["class"], run["jid"], run["executions"]) == ("RailsFlaky", jid, 1)
    assert run["args"] == [{"type": "Date", "value": "2026-11-25"}]
    assert run["kwargs"] == {"type": "Hash", "value": {":note": {"type": "Symbol", "value": "n"}}}
