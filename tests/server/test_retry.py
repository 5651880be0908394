"""JobRetry's rules (Sidekiq 7's job_retry.rb), exercised by raising inside its guards against a real Redis."""

from __future__ import annotations

import base64
import json
import time
import zlib
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.errors import Shutdown, UnknownJobError
from kiq.payload import dumps, new_jid
from kiq.server.retry import Handled, JobRetry, RecordRefused


class Boom(Exception):
    pass


class PlainJob(kiq.Job):
    def perform(self, *args: Any) -> None: ...


class NoRetryJob(kiq.Job):
    kiq_options = {"retry": False}

    def perform(self, *args: Any) -> None: ...


class HookedJob(kiq.Job):
    """Answers ``retry_in`` with whatever the test put in ``answer`` and records its calls."""

    answer: Any = None
    exhausted_answer: Any = None

    def __init__(self) -> None:
        self.retry_in_calls: list[tuple[int, BaseException, dict[str, Any]]] = []
        self.exhausted_calls: list[tuple[dict[str, Any], BaseException]] = []

    def perform(self, *args: Any) -> None: ...

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> Any:
        self.retry_in_calls.append((count, exc, job))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def retries_exhausted(self, job: dict[str, Any], exc: BaseException) -> Any:
        self.exhausted_calls.append((job, exc))
        if isinstance(self.exhausted_answer, BaseException):
            raise self.exhausted_answer
        return self.exhausted_answer


class Recorder:
    """A plugin that records death and error hook calls."""

    def __init__(self) -> None:
        self.deaths: list[tuple[dict[str, Any], BaseException | None]] = []
        self.errors: list[tuple[BaseException, dict[str, Any]]] = []

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None) -> None:
        self.deaths.append((job, exc))

    @kiq.hookimpl
    def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
        self.errors.append((exc, context))


class BrokenDeathHandler:
    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any]) -> None:
        raise RuntimeError("death handler bug")


@pytest.fixture
def hooks(config: kiq.Config) -> Recorder:
    recorder = Recorder()
    config.plugins.register(recorder)
    return recorder


def payload(cls: str = "tests.server.test_retry.PlainJob", **fields: Any) -> str:
    """A job as the client writes it (plus ``fields``; a field set to None is left out)."""
    job = {"retry": True, "queue": "default", "class": cls, "args": [1, "a"], "jid": new_jid()}
    job.update(created_at=time.time() - 5, enqueued_at=time.time() - 1, custom={"kept": True})
    job.update(fields)
    return dumps({key: value for key, value in job.items() if value is not None})


def fail(
    config: kiq.Config, jobstr: str, error: BaseException, instance: Any = None, queue: str = "default"
) -> Handled:
    """Run a job that raises ``error`` inside both guards, as the processor nests them."""
    retrier = JobRetry(config)
    with (
        pytest.raises(Handled) as caught,
        retrier.global_(jobstr, queue),
        retrier.local(instance or PlainJob(), jobstr, queue),
    ):
        raise error
    return caught.value


def entries(r: redis.Redis, key: str) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(member), score) for member, score in r.zrange(key, 0, -1, withscores=True)]


def only_entry(r: redis.Redis, key: str) -> tuple[dict[str, Any], float]:
    found = entries(r, key)
    assert len(found) == 1, found
    return found[0]


def unpack_backtrace(data: str) -> list[str]:
    lines: list[str] = json.loads(zlib.decompress(base64.b64decode(data)))
    return lines


# -- the retry entry ---------------------------------------------------------------------------------
@pytest.mark.cluster
def test_first_failure_goes_to_retry_with_sidekiq_fields(
    config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace
) -> None:
    jobstr = payload()
    error = ValueError("bad input")
    before = time.time()
    handled = fail(config, jobstr, error)
    after = time.time()
    assert handled.__cause__ is error  # the processor reports this one
    job, score = only_entry(r, keys.key("retry"))
    original = json.loads(jobstr)
    assert job == {
        **original,
        "error_message": "bad input",
        "error_class": "ValueError",
        "failed_at": job["failed_at"],
        "retry_count": 0,
    }
    assert isinstance(job["failed_at"], float) and before <= job["failed_at"] <= after
    assert "retried_at" not in job and "error_backtrace" not in job
    # count 0: 0**4 + 15 + rand(10) * 1
    assert before + 15 <= score <= after + 15 + 9
    assert r.zcard(keys.key("dead")) == 0


@pytest.mark.cluster
def test_later_failure_sets_retried_at_and_counts(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    jobstr = payload(retry_count=0, failed_at=1_000.5, error_message="old", error_class="OldError")
    before = time.time()
    fail(config, jobstr, KeyError("k"))
    after = time.time()
    job, score = only_entry(r, keys.key("retry"))
    assert job["retry_count"] == 1 and job["failed_at"] == 1_000.5
    assert before <= job["retried_at"] <= after
    assert job["error_class"] == "KeyError" and job["error_message"] == "'k'"
    # count 1: 1**4 + 15 + rand(10) * 2
    assert before + 16 <= score <= after + 16 + 18


def test_count_grows_the_delay(config: kiq.Config, r: redis.Redis) -> None:
    before = time.time()
    fail(config, payload(retry_count=4), Boom("x"))
    job, score = only_entry(r, "retry")
    assert job["retry_count"] == 5
    assert before + 5**4 + 15 <= score <= time.time() + 5**4 + 15 + 9 * 6


def test_retry_queue_replaces_queue(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(retry_queue="low"), Boom("x"), queue="default")
    assert only_entry(r, "retry")[0]["queue"] == "low"


def test_queue_is_the_one_the_job_came_from(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(queue="critical"), Boom("x"), queue="critical")
    assert only_entry(r, "retry")[0]["queue"] == "critical"


def test_error_class_of_a_non_builtin_is_qualified(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(), Boom("x"))
    assert only_entry(r, "retry")[0]["error_class"] == "tests.server.test_retry.Boom"


def test_error_message_is_cut_and_made_valid_utf8(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(), Boom("é" * 10_005 + "tail"))
    assert only_entry(r, "retry")[0]["error_message"] == "é" * 10_000
    r.delete("retry")
    fail(config, payload(), Boom("bad \udcff byte"))
    assert only_entry(r, "retry")[0]["error_message"] == "bad \ufffd byte"


def test_empty_message_is_the_class_name_like_ruby(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(), Boom())
    assert only_entry(r, "retry")[0]["error_message"] == "tests.server.test_retry.Boom"


def test_message_that_cannot_be_read(config: kiq.Config, r: redis.Redis) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    fail(config, payload(), Unprintable())
    assert only_entry(r, "retry")[0]["error_message"] == "!!! ERROR MESSAGE THREW AN ERROR !!!"


def raise_deep(depth: int) -> None:
    if depth == 0:
        raise Boom("deep")
    raise_deep(depth - 1)


def test_backtrace_true_stores_every_line_compressed(config: kiq.Config, r: redis.Redis) -> None:
    jobstr = payload(backtrace=True)
    with pytest.raises(Handled), JobRetry(config).local(PlainJob(), jobstr, "default"):
        raise_deep(3)
    lines = unpack_backtrace(only_entry(r, "retry")[0]["error_backtrace"])
    # innermost first, in Ruby's "file:line:in `method'" shape
    assert [line.rsplit(":in ", 1)[1] for line in lines[:4]] == ["`raise_deep'"] * 4
    assert lines[0].startswith(f"{__file__}:")
    assert "test_backtrace_true_stores_every_line_compressed" in lines[-1]


def test_backtrace_count_keeps_the_innermost_lines(config: kiq.Config, r: redis.Redis) -> None:
    jobstr = payload(backtrace=2)
    with pytest.raises(Handled), JobRetry(config).local(PlainJob(), jobstr, "default"):
        raise_deep(3)
    lines = unpack_backtrace(only_entry(r, "retry")[0]["error_backtrace"])
    assert len(lines) == 2 and all(line.endswith("`raise_deep'") for line in lines)


def test_backtrace_false_stores_none(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(backtrace=False), Boom("x"))
    assert "error_backtrace" not in only_entry(r, "retry")[0]


# -- retry_in ----------------------------------------------------------------------------------------
def test_retry_in_seconds(config: kiq.Config, r: redis.Redis) -> None:
    instance = HookedJob()
    instance.answer = 1
    error = Boom("x")
    before = time.time()
    fail(config, payload(), error, instance)
    _, score = only_entry(r, "retry")
    assert before + 1 <= score <= time.time() + 1 + 9  # Sidekiq adds its jitter to a custom delay too
    [(count, exc, job)] = instance.retry_in_calls
    assert count == 0 and exc is error and job["error_class"] == "tests.server.test_retry.Boom"


def test_a_function_job_takes_retry_in_and_retries_exhausted_as_functions(
    config: kiq.Config, r: redis.Redis, hooks: Recorder
) -> None:
    asked: list[tuple[int, str]] = []
    exhausted: list[str] = []

    def retry_in(count: int, exc: BaseException, job: dict[str, Any]) -> Any:
        asked.append((count, job["jid"]))
        return 100 if count == 0 else "kill"

    @kiq.job(retry_in=retry_in, retries_exhausted=lambda job, exc: exhausted.append(job["jid"]))
    def sync_account(account_id: int) -> None: ...

    assert sync_account.job_class.get_options().keys().isdisjoint({"retry_in", "retries_exhausted"})
    jobstr = payload()
    before = time.time()
    fail(config, jobstr, Boom("x"), sync_account.job_class())
    job, score = only_entry(r, "retry")
    assert before + 100 <= score <= time.time() + 100 + 9  # the function's delay, with Sidekiq's jitter
    r.delete("retry")  # as the poller takes it
    fail(config, dumps(job), Boom("again"), sync_account.job_class())
    assert asked == [(0, job["jid"]), (1, job["jid"])] and exhausted == [job["jid"]]
    assert r.zcard("retry") == 0 and only_entry(r, "dead")[0]["jid"] == job["jid"]
    with pytest.raises(TypeError, match=r"retry_in=\.\.\.\) takes a function, got 5"):
        kiq.job(retry_in=5)


def test_retry_in_none_zero_or_default_use_the_default_delay(config: kiq.Config, r: redis.Redis) -> None:
    for answer in (None, 0, "default", 0.4):
        r.delete("retry")
        instance = HookedJob()
        instance.answer = answer
        before = time.time()
        fail(config, payload(), Boom("x"), instance)
        assert before + 15 <= only_entry(r, "retry")[1] <= time.time() + 24, answer


def test_retry_in_discard_sets_discarded_at_and_runs_the_death_hooks(
    config: kiq.Config, r: redis.Redis, hooks: Recorder
) -> None:
    """Sidekiq 8.0.7+ (job_retry.rb, ``when :discard``): no retry, no dead set, no retries_exhausted, but
    ``discarded_at`` and the death handlers."""
    instance = HookedJob()
    instance.answer = "discard"
    error = Boom("x")
    before = time.time()
    fail(config, payload(), error, instance)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and instance.exhausted_calls == []
    [(job, exc)] = hooks.deaths
    assert exc is error and type(job["discarded_at"]) is float and before <= job["discarded_at"] <= time.time()
    assert job["failed_at"] <= job["discarded_at"] and job["retry_count"] == 0


@pytest.mark.cluster
def test_retry_in_kill_sends_the_job_to_dead(
    config: kiq.Config, r: redis.Redis, hooks: Recorder, keys: kiq.ext.Keyspace
) -> None:
    instance = HookedJob()
    instance.answer = "kill"
    error = Boom("x")
    fail(config, payload(), error, instance)
    assert r.zcard(keys.key("retry")) == 0
    job, _ = only_entry(r, keys.key("dead"))
    assert job["error_class"] == "tests.server.test_retry.Boom" and job["retry_count"] == 0
    assert [(j["jid"], e) for j, e in hooks.deaths] == [(job["jid"], error)]
    assert len(instance.exhausted_calls) == 1


def test_retry_in_that_raises_falls_back_to_the_default(config: kiq.Config, r: redis.Redis, hooks: Recorder) -> None:
    instance = HookedJob()
    instance.answer = ZeroDivisionError("in retry_in")
    before = time.time()
    fail(config, payload(), Boom("x"), instance)
    assert before + 15 <= only_entry(r, "retry")[1] <= time.time() + 24
    [(exc, context)] = hooks.errors
    assert exc is instance.answer and "falling back to the default" in context["context"]


# -- exhausted: dead set, retries_exhausted, death hooks ---------------------------------------------
@pytest.mark.cluster
def test_retry_n_exhausted_goes_to_dead(
    config: kiq.Config, r: redis.Redis, hooks: Recorder, keys: kiq.ext.Keyspace
) -> None:
    instance = HookedJob()
    error = Boom("last")
    before = time.time()
    fail(config, payload(retry=2, retry_count=1, failed_at=before - 60), error, instance)
    assert r.zcard(keys.key("retry")) == 0
    job, score = only_entry(r, keys.key("dead"))
    assert before <= score <= time.time()
    assert job["retry_count"] == 2 and job["error_message"] == "last" and job["failed_at"] == before - 60
    [(exhausted_job, exhausted_exc)] = instance.exhausted_calls
    assert exhausted_job == job and exhausted_exc is error
    [(death_job, death_exc)] = hooks.deaths
    assert death_job == job and death_exc is error


def test_retry_n_below_the_limit_retries(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(retry=2, retry_count=0), Boom("x"))
    assert only_entry(r, "retry")[0]["retry_count"] == 1 and r.zcard("dead") == 0


def test_retry_true_uses_max_retries(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(retry_count=23), Boom("x"))
    assert only_entry(r, "retry")[0]["retry_count"] == 24
    fail(config, payload(retry_count=24), Boom("x"))
    assert only_entry(r, "dead")[0]["retry_count"] == 25
    config.max_retries = 1
    fail(config, payload(retry_count=0), Boom("x"))
    assert r.zcard("dead") == 2


@pytest.mark.cluster
def test_retry_zero_goes_straight_to_dead(
    config: kiq.Config, r: redis.Redis, hooks: Recorder, keys: kiq.ext.Keyspace
) -> None:
    fail(config, payload(retry=0), Boom("x"))
    assert r.zcard(keys.key("retry")) == 0
    assert only_entry(r, keys.key("dead"))[0]["retry_count"] == 0
    assert len(hooks.deaths) == 1


@pytest.mark.cluster
def test_retry_for_past_goes_to_dead(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    fail(config, payload(retry_for=60, retry_count=0, failed_at=time.time() - 61), Boom("x"))
    assert r.zcard(keys.key("retry")) == 0 and r.zcard(keys.key("dead")) == 1


def test_retry_for_not_yet_past_retries(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(retry_for=60, retry_count=0, failed_at=time.time() - 30), Boom("x"))
    assert r.zcard("retry") == 1 and r.zcard("dead") == 0


def test_dead_false_runs_the_death_hooks_but_keeps_it_out_of_dead(
    config: kiq.Config, r: redis.Redis, hooks: Recorder
) -> None:
    error = Boom("x")
    fail(config, payload(retry=0, dead=False), error)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    [(job, exc)] = hooks.deaths
    assert exc is error and job["error_class"] == "tests.server.test_retry.Boom" and job["dead"] is False
    assert type(job["discarded_at"]) is float  # Sidekiq 8.0.8+: a death hook tells it from a job that went dead


def test_retries_exhausted_that_raises_is_reported(config: kiq.Config, r: redis.Redis, hooks: Recorder) -> None:
    instance = HookedJob()
    instance.exhausted_answer = RuntimeError("bug in retries_exhausted")
    fail(config, payload(retry=0), Boom("x"), instance)
    assert r.zcard("dead") == 1 and len(hooks.deaths) == 1
    [(exc, context)] = hooks.errors
    assert exc is instance.exhausted_answer and context["context"] == "Error calling retries_exhausted"


def test_retries_exhausted_discard_skips_dead_but_runs_the_death_hooks(
    config: kiq.Config, r: redis.Redis, hooks: Recorder
) -> None:
    instance = HookedJob()
    instance.exhausted_answer = "discard"
    fail(config, payload(retry=0), Boom("x"), instance)
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    [(job, _)] = hooks.deaths
    assert type(job["discarded_at"]) is float and len(instance.exhausted_calls) == 1


# -- retry: false, and what the guards let through ---------------------------------------------------
@pytest.mark.cluster
def test_retry_false_no_retry_no_dead_but_death_hooks(
    config: kiq.Config, r: redis.Redis, hooks: Recorder, keys: kiq.ext.Keyspace
) -> None:
    error = Boom("x")
    handled = fail(config, payload(retry=False), error)
    assert handled.__cause__ is error
    assert r.zcard(keys.key("retry")) == 0 and r.zcard(keys.key("dead")) == 0
    [(job, exc)] = hooks.deaths
    assert exc is error and job["retry"] is False and "error_class" not in job  # Sidekiq adds no fields here


def test_missing_retry_takes_the_class_option(config: kiq.Config, r: redis.Redis, hooks: Recorder) -> None:
    fail(config, payload(retry=None), Boom("x"), NoRetryJob())
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and len(hooks.deaths) == 1
    fail(config, payload(retry=None), Boom("x"), PlainJob())
    assert only_entry(r, "retry")[0]["retry"] is True


@pytest.mark.parametrize(("retry", "in_dead"), [(False, 0), (0, 1)])
def test_failing_death_handler_does_not_stop_the_others(
    config: kiq.Config, r: redis.Redis, hooks: Recorder, retry: bool | int, in_dead: int
) -> None:
    config.plugins.register(BrokenDeathHandler())
    fail(config, payload(retry=retry), Boom("x"))
    assert len(hooks.deaths) == 1 and r.zcard("dead") == in_dead
    [(exc, context)] = hooks.errors
    assert str(exc) == "death handler bug" and context["context"] == "plugin 'BrokenDeathHandler' failed in kiq_death"


def test_unknown_job_class_is_a_failure_of_that_job(config: kiq.Config, r: redis.Redis) -> None:
    jobstr = payload("NoSuchJob")
    with pytest.raises(Handled) as caught, JobRetry(config).global_(jobstr, "default"):
        kiq.registry.get("NoSuchJob")
    assert isinstance(caught.value.__cause__, UnknownJobError)
    job, _ = only_entry(r, "retry")
    assert job["class"] == "NoSuchJob" and job["retry_count"] == 0
    assert job["error_class"] == "kiq.errors.UnknownJobError" and "'NoSuchJob'" in job["error_message"]


def test_handled_from_local_is_recorded_once(config: kiq.Config, r: redis.Redis, hooks: Recorder) -> None:
    fail(config, payload(retry=0), Boom("x"))
    assert r.zcard("dead") == 1 and len(hooks.deaths) == 1


@pytest.mark.cluster
def test_success_records_nothing(config: kiq.Config, r: redis.Redis, keys: kiq.ext.Keyspace) -> None:
    retrier = JobRetry(config)
    jobstr = payload()
    with retrier.global_(jobstr, "default"), retrier.local(PlainJob(), jobstr, "default"):
        pass
    assert r.zcard(keys.key("retry")) == 0 and r.zcard(keys.key("dead")) == 0


def test_shutdown_passes_through_untouched(config: kiq.Config, r: redis.Redis, hooks: Recorder) -> None:
    shutdown = Shutdown()
    retrier = JobRetry(config)
    jobstr = payload(retry=False)
    with (
        pytest.raises(Shutdown) as caught,
        retrier.global_(jobstr, "default"),
        retrier.local(PlainJob(), jobstr, "default"),
    ):
        raise shutdown
    assert caught.value is shutdown
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and hooks.deaths == []


def test_an_error_caused_by_shutdown_is_the_shutdown(config: kiq.Config, r: redis.Redis) -> None:
    retrier = JobRetry(config)
    jobstr = payload()
    with pytest.raises(Shutdown), retrier.global_(jobstr, "default"), retrier.local(PlainJob(), jobstr, "default"):
        try:
            raise Shutdown()
        except Shutdown:
            raise Boom("cleanup failed while shutting down") from None  # __context__ is the Shutdown
    assert r.zcard("retry") == 0


def test_sys_exit_in_a_job_is_a_failure(config: kiq.Config, r: redis.Redis) -> None:
    fail(config, payload(), SystemExit(3))
    assert only_entry(r, "retry")[0]["error_class"] == "SystemExit"


def test_redis_down_while_recording_holds_the_write(config: kiq.Config) -> None:
    """Redis unreachable: the failure's record is ``RecordRefused`` (a write the worker retries), with the job's
    error as its cause and the same write as a replayable command."""
    unreachable = kiq.Config(redis_url="redis://127.0.0.1:1/0")
    retrier = JobRetry(unreachable)
    with pytest.raises(RecordRefused) as raised, retrier.global_(payload(), "default"):
        raise Boom("x")
    held = raised.value
    assert isinstance(held.__cause__, Boom) and isinstance(held.refusal, redis.ConnectionError)
    assert held.command[:2] == ["ZADD", "retry"] and float(held.command[2]) > time.time()
    recorded = json.loads(held.command[3])
    assert (recorded["error_message"], recorded["retry_count"]) == ("x", 0)


def test_a_redis_error_that_is_no_outage_escapes_unrecorded(config: kiq.Config, r: redis.Redis) -> None:
    """A write that would fail again (a wrong type) is not held: the error escapes, the job is not acknowledged."""
    r.set("retry", "not a sorted set")
    with pytest.raises(redis.ResponseError), JobRetry(config).global_(payload(), "default"):
        raise Boom("x")


# -- payload fields written by someone else --------------------------------------------------------------
@pytest.mark.parametrize(
    "fields",
    [
        {"retry_count": "abc"},
        {"retry_count": -1e300},
        {"retry_count": 10**400},
        {"retry_count": -1},
        {"backtrace": "abc"},
        {"backtrace": 2.5},
        {"retry_for": "abc"},
        {"retry_for": -5},
        {"failed_at": "yesterday", "retry_for": 3600, "retry_count": 1},
        {"retry_queue": 5},
        {"retry_queue": ""},
    ],
    ids=repr,
)
def test_unusable_retry_fields_fall_back_to_safe_defaults_and_the_job_is_retried(
    config: kiq.Config, r: redis.Redis, fields: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    fail(config, payload(**fields), Boom("x"))
    job, score = only_entry(r, "retry")
    assert isinstance(job["retry_count"], int) and 0 <= job["retry_count"] <= 2
    assert job["queue"] == "default"
    assert time.time() < score < time.time() + 3600
    assert "payload fields the retry rules cannot use were ignored" in caplog.text


@pytest.mark.parametrize("answer", [float("inf"), float("nan"), 10**400, -5, "7"])
def test_retry_in_answers_that_are_not_usable_delays(config: kiq.Config, r: redis.Redis, answer: Any) -> None:
    instance = HookedJob()
    instance.answer = answer
    fail(config, payload(), Boom("x"), instance)
    _, score = only_entry(r, "retry")
    assert score < time.time() + 100 * 366 * 24 * 3600


class BuggyRetry(JobRetry):
    """Stands for a bug in recording a failure that no test input reaches any more."""

    def _process_retry(self, instance: Any, job: dict[str, Any], queue: str, exc: BaseException) -> None:
        raise RuntimeError("a bug")


def test_a_recording_that_fails_for_another_reason_than_redis_puts_the_job_in_dead_as_stored(
    config: kiq.Config, r: redis.Redis, hooks: Recorder
) -> None:
    jobstr = payload()
    retrier = BuggyRetry(config)
    with pytest.raises(Handled), retrier.global_(jobstr, "default"), retrier.local(PlainJob(), jobstr, "default"):
        raise Boom("x")
    assert r.zrange("dead", 0, -1) == [jobstr]
    assert len(hooks.deaths) == 1 and any(
        context["context"] == "Recording a job's failure failed" for _, context in hooks.errors
    )


def test_an_unknown_class_without_retry_is_retried_then_dead(config: kiq.Config, r: redis.Redis) -> None:
    jobstr = payload("NoSuchJob", retry=None)
    with pytest.raises(Handled), JobRetry(config).global_(jobstr, "default"):
        kiq.registry.get("NoSuchJob")
    job, _ = only_entry(r, "retry")
    assert job["retry"] is True and job["retry_count"] == 0
