"""The Processor: running one job through retry, logging, stats and middleware, with Sidekiq's ack rules;
and the job logger's context and formats."""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.errors import Shutdown
from kiq.logging import JsonFormatter, PlainFormatter, setup_logging
from kiq.middleware import ServerMiddleware, Wrapper
from kiq.payload import dumps, new_jid, parse_payload
from kiq.server import outcomes
from kiq.server.aio import EventLoop
from kiq.server.outcomes import WHERE, RedisOutage
from kiq.server.processor import Processor
from tests.support import Unit, run_on_event_loop, wait_until

seen: list[tuple[str, Any, str]] = []


class Remember(kiq.Job):
    kiq_name = "tests.Remember"

    def perform(self, value: Any) -> None:
        seen.append((self.jid, value, self.job["class"]))
        logging.getLogger("tests.jobs").info("inside %s", value)


class Boom(kiq.Job):
    kiq_name = "tests.Boom"

    def perform(self) -> None:
        raise RuntimeError("boom")


class Interrupted(kiq.Job):
    kiq_name = "tests.Interrupted"

    def perform(self) -> None:
        raise Shutdown


def payload(name: str, *args: Any, **extra: Any) -> str:
    return dumps({"class": name, "args": list(args), "jid": new_jid(), "queue": "default", "retry": 3, **extra})


def make_processor(config: kiq.Config) -> Processor:
    return Processor(config, fetcher=None, stopping=threading.Event(), outage=RedisOutage(config), name="t")  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    seen.clear()
    yield
    seen.clear()


def test_a_finished_job_is_acknowledged_and_counted(config: kiq.Config) -> None:
    processor = make_processor(config)
    unit = Unit(payload("tests.Remember", 7))
    processor.process(unit)
    assert [(value, name) for _, value, name in seen] == [(7, "tests.Remember")]
    assert seen[0][0] == json.loads(unit.job)["jid"]
    assert unit.acked == 1 and (processor.processed, processor.failed) == (1, 0)
    assert processor.unit is None and processor.work is None


def test_a_failing_job_is_retried_acknowledged_and_counted_as_failed(config: kiq.Config, r: redis.Redis) -> None:
    processor = make_processor(config)
    unit = Unit(payload("tests.Boom"))
    processor.process(unit)
    assert unit.acked == 1 and (processor.processed, processor.failed) == (1, 1)
    (retry,) = r.zrange("retry", 0, -1)
    assert json.loads(retry)["error_message"] == "boom"


def test_an_unknown_class_is_a_failure_of_that_job(config: kiq.Config, r: redis.Redis) -> None:
    processor = make_processor(config)
    unit = Unit(payload("os.system", "echo never"))  # never imported: only the registry is asked
    processor.process(unit)
    assert unit.acked == 1 and processor.failed == 1
    (retry,) = r.zrange("retry", 0, -1)
    assert "UnknownJobError" in json.loads(retry)["error_class"]


def test_an_unparseable_payload_goes_to_dead_and_is_acknowledged(config: kiq.Config, r: redis.Redis) -> None:
    processor = make_processor(config)
    malformed = ['{"class": "tests.Remember", "args": "oops"}', '{"args": [1]}', '{"class": 7, "args": []}']
    for raw in ("{not json", "[1, 2]", *malformed):
        unit = Unit(raw)
        processor.process(unit)
        assert unit.acked == 1
        assert r.zscore("dead", raw) is not None
    assert seen == []  # "oops" was not splatted into perform
    processor.process(good := Unit(payload("tests.Remember", 1)))
    assert good.acked == 1 and len(seen) == 1


def test_shutdown_is_neither_acknowledged_nor_counted(config: kiq.Config, r: redis.Redis) -> None:
    processor = make_processor(config)
    unit = Unit(payload("tests.Interrupted"))
    processor.process(unit)
    assert unit.acked == 0 and (processor.processed, processor.failed) == (0, 0)
    assert r.zcard("retry") == 0


def error_contexts(config: kiq.Config) -> list[str]:
    """The contexts of the errors ``config`` reports from now on (its ``kiq_error`` hooks), in order."""
    errors: list[str] = []

    class Errors:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
            errors.append(context["context"])

    config.add_plugin(Errors())
    return errors


def test_an_internal_error_is_not_acknowledged(config: kiq.Config, r: redis.Redis) -> None:
    # the job fails and Redis refuses its retry entry for good (a wrong type, not an outage): not acknowledged
    r.set("retry", "not a sorted set")
    errors = error_contexts(config)
    processor = make_processor(config)
    unit = Unit(payload("tests.Boom"))
    processor.process(unit)
    assert unit.acked == 0 and errors == ["Internal exception!"] and processor.keeper.held == 0
    processor.process(Unit(payload("tests.Remember", 2)))  # and the processor goes on
    assert len(seen) == 1


def test_a_failure_redis_cannot_take_is_held_not_acknowledged(redis_url: str) -> None:
    # Redis is unreachable while the retry is recorded: the outcome is held (and retried), the job not acknowledged
    config = kiq.Config(redis_url="redis://127.0.0.1:1")
    errors = error_contexts(config)
    processor = make_processor(config)
    unit = Unit(payload("tests.Boom"))
    processor.process(unit)
    assert unit.acked == 0 and processor.keeper.held == 1
    assert errors[0] == "Job raised exception" and "is unreachable (job outcomes" in errors[1], errors
    processor.process(Unit(payload("tests.Remember", 2)))  # and the processor goes on
    assert len(seen) == 1
    assert processor.keeper.give_up() == 1 and unit.acked == 0


def test_server_middleware_wraps_perform(config: kiq.Config) -> None:
    calls: list[str] = []

    class Around(ServerMiddleware):
        def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
            calls.append(f"in {job_instance.jid == job['jid']} {queue}")
            yield
            calls.append("out")

    config.server_middleware.add(Around)
    processor = make_processor(config)
    processor.process(Unit(payload("tests.Remember", 3), queue_name="q"))
    assert calls == ["in True q", "out"] and len(seen) == 1


def test_work_state_is_set_while_the_job_runs(config: kiq.Config) -> None:
    processor = make_processor(config)
    states: list[Any] = []

    class Peek(ServerMiddleware):
        def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
            states.append((processor.work, processor.unit))
            yield

    config.server_middleware.add(Peek)
    unit = Unit(payload("tests.Remember", 4))
    processor.process(unit)
    ((work, current),) = states
    assert work[:2] == ("default", unit.job) and isinstance(work[2], int) and current is unit


# -- the job logger -------------------------------------------------------------------------------------
@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = setup_logging("INFO", "plain")
    handler.setStream(stream)  # type: ignore[attr-defined]
    yield stream
    logging.getLogger().removeHandler(handler)


def test_job_logs_carry_class_jid_and_elapsed(config: kiq.Config, log_output: io.StringIO) -> None:
    unit = Unit(payload("tests.Remember", "x"))
    make_processor(config).process(unit)
    jid = json.loads(unit.job)["jid"]
    lines = log_output.getvalue().splitlines()
    inside = next(line for line in lines if "inside x" in line)
    assert f"class=tests.Remember jid={jid} INFO: inside x" in inside  # the job's own log line
    done = next(line for line in lines if line.endswith("INFO: done"))
    assert f"class=tests.Remember jid={jid} elapsed=" in done and " pid=" in done and " tid=" in done


def test_a_failed_job_logs_fail(config: kiq.Config, log_output: io.StringIO) -> None:
    make_processor(config).process(Unit(payload("tests.Boom")))
    assert any(
        line.endswith("INFO: fail") and "class=tests.Boom" in line for line in log_output.getvalue().splitlines()
    )


def test_json_format() -> None:
    record = logging.LogRecord("kiq", logging.INFO, __file__, 1, "done %s", ("now",), None)
    record.kiq_tid = "abc"
    record.kiq_context = {"class": "A", "jid": "j", "elapsed": 0.5}
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "done now" and line["lvl"] == "INFO" and line["tid"] == "abc"
    assert line["ctx"] == {"class": "A", "jid": "j", "elapsed": 0.5} and line["ts"].endswith("Z")
    plain = PlainFormatter().format(record)
    assert plain.endswith(" tid=abc class=A jid=j elapsed=0.5 INFO: done now")


def kiq_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "kiq"]


def ends(caplog: pytest.LogCaptureFixture) -> int:
    return sum("works again" in m for m in kiq_messages(caplog))


def test_outage_is_logged_once_until_recovered(
    config: kiq.Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes, "LEFTOVER", 0.2)
    outage = RedisOutage(config)
    with caplog.at_level(logging.INFO, logger="kiq"):
        for _ in range(3):
            outage.failed(ConnectionError("refused"), "fetch")
        outage.recovered("heartbeat")  # at maxmemory the heartbeat fails while fetches work: not this outage
        outage.recovered("fetch")
        outage.recovered("fetch")
        wait_until(lambda: ends(caplog), 5, message="the end, LEFTOVER after the start")
    messages = kiq_messages(caplog)
    assert sum("unreachable" in m for m in messages) == 1
    assert sum("works again (fetch)" in m for m in messages) == 1
    assert not any("works again (heartbeat)" in m for m in messages)


async def _never_awaited() -> None:  # pragma: no cover - the point is that it must not run unawaited
    seen.append(("ran", None, ""))


class ReturnsCoroutine(kiq.Job):
    kiq_name = "tests.ReturnsCoroutine"

    def perform(self) -> Any:
        return _never_awaited()  # a plain def that hands back a coroutine: nothing awaits it


def test_a_coroutine_returned_by_perform_fails_the_job_through_the_retry_rules(
    config: kiq.Config, r: redis.Redis, recwarn: pytest.WarningsRecorder
) -> None:
    unit = Unit(payload("tests.ReturnsCoroutine"))
    make_processor(config).process(unit)
    [entry] = r.zrange("retry", 0, -1)
    retried = json.loads(entry)
    assert retried["error_class"] == "TypeError" and "returned a coroutine" in retried["error_message"]
    assert unit.acked == 1  # acknowledged because its failure was recorded, not as done
    assert seen == []
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


class Declined(kiq.Job):
    kiq_name = "tests.Declined"

    def perform(self, reason: str) -> None:
        kiq.ext.report_failure(f"declined: {reason}")  # what the tracking plugin does for a TaskFailure


def test_a_reported_failure_is_logged_fail_and_counted_but_not_retried(
    config: kiq.Config, r: redis.Redis, log_output: io.StringIO
) -> None:
    processor = make_processor(config)
    unit = Unit(payload("tests.Declined", "card expired"))
    processor.process(unit)
    assert unit.acked == 1 and (processor.processed, processor.failed) == (1, 1)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    (end,) = [line for line in log_output.getvalue().splitlines() if "class=tests.Declined" in line]
    assert end.endswith("INFO: fail: declined: card expired")
    processor.process(Unit(payload("tests.Remember", 1)))  # the report belonged to that job only
    assert (processor.processed, processor.failed) == (2, 1)
    assert log_output.getvalue().splitlines()[-1].endswith("INFO: done")


def test_report_failure_outside_a_job_reports_nothing() -> None:
    assert kiq.ext.report_failure("no job runs in this thread") is False


# -- async jobs on the event loop ---------------------------------------------------------------------------
class AsyncRemember(kiq.Job):
    kiq_name = "tests.AsyncRemember"

    async def perform(self, value: Any) -> str:
        await asyncio.sleep(0.01)
        seen.append((self.jid, value, self.job["class"]))
        logging.getLogger("tests.jobs").info("inside %s", value)
        return "remembered"


class AsyncBoom(kiq.Job):
    kiq_name = "tests.AsyncBoom"

    async def perform(self) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("async boom")


def test_async_jobs_go_through_the_same_steps_as_a_threads(
    config: kiq.Config, r: redis.Redis, log_output: io.StringIO
) -> None:
    entered: list[tuple[str, Any]] = []
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="")

    class Around(ServerMiddleware):
        def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
            token = current.set(job["jid"])  # what a middleware makes current is current inside the coroutine
            try:
                result = yield
                entered.append(("result", result))
            except RuntimeError as exc:
                entered.append(("error", str(exc)))
                raise
            finally:
                current.reset(token)

    class Peek(ServerMiddleware):
        def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
            yield
            entered.append(("inner", current.get() == job["jid"]))

    config.server_middleware.add(Around)
    config.server_middleware.add(Peek)
    units = run_on_event_loop(
        config, [payload("tests.AsyncRemember", n) for n in range(5)] + [payload("tests.AsyncBoom")]
    )
    assert all(unit.acked == 1 for unit in units)  # finished, or its failure recorded
    assert sorted(value for _, value, _ in seen) == [0, 1, 2, 3, 4]
    assert sorted(entered, key=str) == sorted(
        [("inner", True)] * 5 + [("result", "remembered")] * 5 + [("error", "async boom")], key=str
    )
    (retry,) = r.zrange("retry", 0, -1)
    assert json.loads(retry)["error_message"] == "async boom"
    jids = {json.loads(unit.job)["jid"] for unit in units}
    lines = log_output.getvalue().splitlines()
    inside = [line for line in lines if "INFO: inside" in line]
    assert len(inside) == 5 and all(any(f"jid={jid} " in line for jid in jids) for line in inside)
    assert sum(line.endswith("INFO: done") for line in lines) == 5
    assert sum(line.endswith("INFO: fail") for line in lines) == 1


def test_an_async_job_given_to_a_processor_thread_fails_instead_of_being_acknowledged_unrun(
    config: kiq.Config, r: redis.Redis
) -> None:
    unit = Unit(payload("tests.AsyncRemember", 1))  # a processor built without an event loop to hand it to
    make_processor(config).process(unit)
    assert seen == [] and unit.acked == 1
    (retry,) = r.zrange("retry", 0, -1)
    assert "returned a coroutine, which a processor thread does not await" in json.loads(retry)["error_message"]


class CancelsItself(kiq.Job):
    kiq_name = "tests.CancelsItself"

    async def perform(self) -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(1)


def test_a_job_that_cancels_itself_fails_through_the_retry_rules(config: kiq.Config, r: redis.Redis) -> None:
    """Only a hard shutdown's cancellation means "requeued, do not acknowledge": any other would lose the job."""
    (unit,) = run_on_event_loop(config, [payload("tests.CancelsItself")])
    assert unit.acked == 1
    (retry,) = r.zrange("retry", 0, -1)
    assert json.loads(retry)["error_message"].startswith("CancelsItself.perform was cancelled")


class NoWork:
    """A fetcher with no jobs that counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def retrieve_work(self) -> None:
        self.asked += 1


def test_an_async_jobs_refused_outcome_is_held_by_the_workers_keeper_and_fetching_pauses(redis_url: str) -> None:
    config = kiq.Config(redis_url="redis://127.0.0.1:1")  # unreachable: the retry entry is refused
    fetcher = NoWork()
    processor = Processor(config, fetcher, threading.Event(), RedisOutage(config), "t")  # type: ignore[arg-type]
    loop = EventLoop(config, "t-loop", 2, processor.keeper)  # as a Manager builds them: one keeper
    loop.start()
    unit = Unit(payload("tests.CancelsItself"))
    try:
        assert loop.hand_off(unit, parse_payload(unit.job), CancelsItself, threading.Event())
        wait_until(lambda: not loop.slots, 10, message="the async job to end")
    finally:
        loop.close(5)
    assert unit.acked == 0 and processor.keeper.held == 1
    processor.stopping.set()  # the fetch would otherwise wait (up to 2 s) for the held outcome first
    assert processor.fetch() is None and fetcher.asked == 0
    assert processor.keeper.give_up() == 1


# -- job observers (kiq_job_observer) -----------------------------------------------------------------------------
class Observer:
    """Records what it is told, as ``kiq.hookspecs.JobObserver``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []  # (event, queue, class)

    def started(self, queue: str, job: dict[str, Any]) -> None:
        self.events.append(("started", queue, job["class"]))

    def finished(self, queue: str, job: dict[str, Any], seconds: float, outcome: str) -> None:
        assert seconds >= 0
        self.events.append((outcome, queue, job["class"]))


class Observers:
    def __init__(self) -> None:
        self.made: list[Observer] = []

    @kiq.hookimpl
    def kiq_job_observer(self) -> Observer:
        self.made.append(observer := Observer())
        return observer


class BrokenObserver:
    def started(self, queue: str, job: dict[str, Any]) -> None:
        raise RuntimeError("this observer is broken")

    def finished(self, queue: str, job: dict[str, Any], seconds: float, outcome: str) -> None:
        raise RuntimeError("this observer is broken")


class BrokenObservers:
    @kiq.hookimpl
    def kiq_job_observer(self) -> BrokenObserver:
        return BrokenObserver()


def test_an_observer_per_runner_sees_every_attempt_also_those_that_fail_before_the_middleware(
    config: kiq.Config,
) -> None:
    observers = config.add_plugin(Observers)
    first, second = make_processor(config), make_processor(config)
    assert len(observers.made) == 2  # one per runner: each counts without a lock
    for name in ("tests.Remember", "tests.Boom", "os.system", "tests.Declined", "tests.Interrupted"):
        first.process(Unit(payload(name, "x") if name in ("tests.Remember", "tests.Declined") else payload(name)))
    assert observers.made[0].events == [
        ("started", "default", "tests.Remember"),
        ("done", "default", "tests.Remember"),
        ("started", "default", "tests.Boom"),
        ("failed", "default", "tests.Boom"),
        ("started", "default", "os.system"),  # an unknown class: no middleware ran, the observer still sees it
        ("failed", "default", "os.system"),
        ("started", "default", "tests.Declined"),
        ("failed", "default", "tests.Declined"),  # kiq.ext.report_failure
        ("started", "default", "tests.Interrupted"),
        ("requeued", "default", "tests.Interrupted"),  # a hard shutdown's: no attempt
    ]
    assert observers.made[1].events == []
    second.process(Unit(payload("tests.Remember", 2)))
    assert [event for event, _, _ in observers.made[1].events] == ["started", "done"]


def test_a_raising_observer_is_reported_and_the_job_and_other_observers_go_on(config: kiq.Config) -> None:
    errors = error_contexts(config)
    config.add_plugin(BrokenObservers)
    observers = config.add_plugin(Observers)
    processor = make_processor(config)
    unit = Unit(payload("tests.Remember", 3))
    processor.process(unit)
    assert unit.acked == 1 and (processor.processed, processor.failed) == (1, 0)
    assert [value for _, value, _ in seen] == [3]
    assert [event for event, _, _ in observers.made[0].events] == ["started", "done"]
    assert sum("a job observer failed" in context for context in errors) == 2  # started and finished


def test_a_failure_just_after_an_outage_is_its_leftover_and_not_logged(
    config: kiq.Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread whose connection broke in the outage uses it only after the others saw Redis back: that is not a
    second outage (tests/plugins/workflow/test_adversarial_outage.py saw two "unreachable" lines so)."""
    monkeypatch.setattr(outcomes, "LEFTOVER", 0.2)
    outage = RedisOutage(config)
    with caplog.at_level(logging.INFO, logger="kiq"):
        outage.failed(ConnectionError("refused"), "fetch")
        time.sleep(0.25)
        outage.recovered("fetch")  # past LEFTOVER: ended at once
        assert ends(caplog) == 1
        outage.failed(ConnectionError("Connection closed by server."), "fetch")  # the leftover
        outage.recovered("fetch")
        time.sleep(0.25)
        outage.failed(ConnectionError("refused"), "heartbeat")  # past LEFTOVER: a new outage
        outage.recovered("heartbeat")
        wait_until(lambda: ends(caplog) == 2, 5, message="the second end, LEFTOVER after its start")
    messages = kiq_messages(caplog)
    assert [m.split(" (")[0].split(" at ")[0] for m in messages] == ["Redis", "Redis works again", "Redis",
                                                                     "Redis works again"]  # fmt: skip
    assert sum("unreachable" in m for m in messages) == 2 and "Connection closed" not in " ".join(messages)


def test_a_leftover_that_lasts_is_logged_as_an_outage(
    config: kiq.Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes, "LEFTOVER", 0.2)
    outage = RedisOutage(config)
    with caplog.at_level(logging.INFO, logger="kiq"):
        outage.failed(ConnectionError("refused"), "fetch")
        outage.recovered("fetch")
        wait_until(lambda: ends(caplog), 5, message="the end, LEFTOVER after the start")
        outage.failed(ConnectionError("refused again"), "fetch")  # taken for a leftover at first
        time.sleep(0.25)
        outage.failed(ConnectionError("refused again"), "fetch")  # still failing: Redis is down again
        outage.recovered("fetch")
    messages = kiq_messages(caplog)
    assert sum("unreachable" in m for m in messages) == 2, messages
    assert sum("works again" in m for m in messages) == 2, messages


def test_a_success_just_after_an_outage_began_ends_it_only_if_nothing_fails_within_leftover(
    config: kiq.Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When Redis stops, a thread whose reply was already on its way succeeds just after another's fetch failed
    (tests/plugins/groups/test_crash.py saw "works again ... after 0.0 s", then a second outage logged for one): that
    ends the outage only if nothing fails again within LEFTOVER of its start, and the end is logged then."""
    monkeypatch.setattr(outcomes, "LEFTOVER", 0.3)
    outage = RedisOutage(config)
    with caplog.at_level(logging.INFO, logger="kiq"):
        # a lone early success (tests/server/test_outcomes.py's death hook): the end is logged, LEFTOVER later
        outage.failed(ConnectionError("Connection reset by peer"), "fetch")
        outage.recovered("fetch")
        assert ends(caplog) == 0 and outage.down_since is not None
        wait_until(lambda: ends(caplog), 5, message="the end, LEFTOVER after the start")
        assert outage.down_since is None
        time.sleep(0.35)  # past the leftover window of that end
        # the crash test's: a failure after the early success but within LEFTOVER continues the same outage
        outage.failed(ConnectionError("Connection reset by peer"), "fetch")
        outage.recovered("fetch")  # a reply already on its way
        outage.failed(ConnectionError("refused"), "fetch")  # the refused reconnection
        outage.failed(ConnectionError("refused"), WHERE, held=2)  # and two job outcomes held
        time.sleep(0.35)  # past LEFTOVER: nothing more is logged, the outage goes on
        assert outage.down_since is not None and ends(caplog) == 1
        outage.failed(ConnectionError("refused"), "fetch")  # still failing: no new start either
        outage.recovered("fetch")
        assert outage.down_since is not None  # the held outcomes are not written yet
        outage.recovered(WHERE)  # past LEFTOVER: ended at once
        assert outage.down_since is None and ends(caplog) == 2
        time.sleep(0.35)  # no timer left to log anything
    messages = kiq_messages(caplog)
    assert [m.split(" (")[0].split(" at ")[0] for m in messages] == ["Redis", "Redis works again", "Redis",
                                                                     "Redis works again"]  # fmt: skip
    assert messages[1] == "Redis works again (fetch) after 0.0 s", messages
    assert messages[3].startswith(f"Redis works again (fetch, {WHERE}) after 0.") and messages[3].endswith(
        "; 2 job outcomes held meanwhile are written"
    ), messages
    assert not [thread for thread in threading.enumerate() if thread.name == "kiq-outage"]
