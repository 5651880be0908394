"""The iteration engine driven in-process against a real Redis: resume, interruption, cancellation, errors, hooks.
(The worker end to end, signals and crashes included, is in test_workers.py.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import kiq
from kiq.iteration import state
from tests.jobs.iteration import HOOKS, AsyncWalk, Walk, seen

JID = "abcdefabcdefabcdefabcdef"


def make(job_class: type[kiq.IterableJob], args: list[Any], stopping: threading.Event | None = None) -> Any:
    job = job_class()
    job.jid = JID
    job.job = {"class": job_class.kiq_name, "jid": JID, "args": args, "queue": "iteration"}
    job.interrupt_when(stopping)
    return job


def run(job_class: type[kiq.IterableJob], args: list[Any], stopping: threading.Event | None = None) -> str:
    """Run the job once as a worker would; "complete", "interrupted" or the error's text."""
    job = make(job_class, args, stopping)
    try:
        result = job.perform(*args)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except kiq.Interrupted:
        return "interrupted"
    except Exception as exc:
        return str(exc)
    return "complete"


def test_a_walk_runs_every_item_once_and_deletes_its_state(config: kiq.Config, r: redis.Redis) -> None:
    assert run(Walk, [50]) == "complete"
    assert seen(config) == dict.fromkeys(range(50), 1)
    assert r.lrange(HOOKS, 0, -1) == ["start", "stop", "complete"]
    assert not r.exists(f"it-{JID}")


def test_an_error_saves_the_cursor_and_the_next_run_resumes_at_that_item(config: kiq.Config, r: redis.Redis) -> None:
    assert run(Walk, [20, 0, 7]) == "item 7 fails once"
    assert state.read(r, JID) == kiq.IterationState(JID, executions=1, cursor=7, runtime=0, cancelled_at=None)
    assert run(Walk, [20, 0, 7]) == "complete"
    assert seen(config) == {**dict.fromkeys(range(20), 1), 7: 2}  # the failed item runs again, nothing else
    assert r.lrange(HOOKS, 0, -1) == ["start", "resume:7", "stop", "complete"]


def test_the_stopping_flag_interrupts_at_the_next_item_and_saves_it(config: kiq.Config, r: redis.Redis) -> None:
    stopping = threading.Event()

    class StopsAt5(Walk, abstract=True):
        def each_iteration(self, item: int, *args: Any) -> None:
            super().each_iteration(item, *args)
            if item == 5:
                stopping.set()

    assert run(StopsAt5, [10], stopping) == "interrupted"
    saved = state.read(r, JID)
    assert saved is not None and saved.cursor == 6 and saved.executions == 1 and saved.runtime > 0
    assert isinstance(r.hget(f"it-{JID}", "rt"), str) and "." in r.hget(f"it-{JID}", "rt")
    assert run(Walk, [10]) == "complete"
    assert seen(config) == dict.fromkeys(range(10), 1)
    assert r.lrange(HOOKS, 0, -1) == ["start", "stop", "resume:6", "stop", "complete"]


def test_max_iteration_runtime_interrupts_after_at_least_one_item(config: kiq.Config, r: redis.Redis) -> None:
    class Limited(Walk, abstract=True):
        max_iteration_runtime = 0.000001

    runs = 0
    while run(Limited, [5]) == "interrupted":
        runs += 1
        assert runs < 10
    assert runs == 4  # one item per run: each run makes progress
    assert seen(config) == dict.fromkeys(range(5), 1)


def test_the_timeout_option_is_a_runtime_limit_between_items(config: kiq.Config) -> None:
    job = make(Walk, [3])
    job.interrupt_when(None, 0.000001)  # what the worker hands over from "timeout" instead of arming its watchdog
    with pytest.raises(kiq.Interrupted):
        job.perform(3)
    assert seen(config) == {0: 1}


def test_a_cancelled_job_runs_on_cancel_and_completes(config: kiq.Config, r: redis.Redis) -> None:
    kiq.cancel(JID)
    assert run(Walk, [10]) == "complete"
    assert seen(config) == {}
    assert r.lrange(HOOKS, 0, -1) == ["start", "cancel", "stop", "complete"]
    assert not r.exists(f"it-{JID}")


def test_a_cancel_while_running_is_seen_at_the_next_save(config: kiq.Config, r: redis.Redis) -> None:
    class CancelsAt3(Walk, abstract=True):
        iteration_flush_interval = 0.0  # a save before every item

        def each_iteration(self, item: int, *args: Any) -> None:
            super().each_iteration(item, *args)
            if item == 3:
                kiq.cancel(self.jid)

    assert run(CancelsAt3, [10]) == "complete"
    assert seen(config) == dict.fromkeys(range(4), 1)
    assert r.lrange(HOOKS, 0, -1) == ["start", "cancel", "stop", "complete"]


def test_around_iteration_wraps_each_item(config: kiq.Config, r: redis.Redis) -> None:
    class Wrapped(Walk, abstract=True):
        def around_iteration(self) -> Iterator[None]:
            r.rpush(HOOKS, f"before:{self.cursor}")
            yield
            r.rpush(HOOKS, f"after:{self.cursor}")

    assert run(Wrapped, [2]) == "complete"
    assert r.lrange(HOOKS, 0, -1) == ["start", "before:0", "after:0", "before:1", "after:1", "stop", "complete"]


def test_async_jobs_walk_and_resume(config: kiq.Config, r: redis.Redis) -> None:
    stopping = threading.Event()
    stopping.set()
    assert run(AsyncWalk, [30], stopping) == "interrupted"  # stopping at once: nothing ran, the cursor is 0
    saved = state.read(r, JID)
    assert saved is not None and saved.cursor == 0
    assert run(AsyncWalk, [30]) == "complete"
    assert seen(config) == dict.fromkeys(range(30), 1)
    assert r.lrange(HOOKS, 0, -1) == ["complete"]
    assert not r.exists(f"it-{JID}")


def test_an_iterable_job_cannot_define_perform() -> None:
    with pytest.raises(kiq.ConfigError, match="must not define perform"):

        class Wrong(kiq.IterableJob, abstract=True):
            def perform(self) -> None: ...


def test_bad_enumerators_are_named(config: kiq.Config) -> None:
    class NotPairs(kiq.IterableJob, abstract=True):
        def build_enumerator(self, *, cursor: Any) -> Any:
            return [1, 2]

    class NotIterable(kiq.IterableJob, abstract=True):
        def build_enumerator(self, *, cursor: Any) -> Any:
            return 42

    assert "must yield (item, cursor) pairs, got 1" in run(NotPairs, [])
    assert "must return an iterable of (item, cursor) pairs" in run(NotIterable, [])


def test_a_cursor_that_is_not_json_fails_the_job_with_a_clear_error(config: kiq.Config) -> None:
    class BadCursor(kiq.IterableJob, abstract=True):
        iteration_flush_interval = 0.0

        def build_enumerator(self, *, cursor: Any) -> Any:
            return [(1, object())]

        def each_iteration(self, item: Any) -> None: ...

    assert "an iteration cursor must be JSON-native" in run(BadCursor, [])


def test_a_push_is_checked_against_build_enumerators_parameters(config: kiq.Config) -> None:
    with pytest.raises(kiq.InvalidJobError, match=r"build_enumerator\(count, pause=0.0, fail_at=-1\)"):
        Walk.perform_async()
    with pytest.raises(kiq.InvalidJobError, match="count"):
        Walk.perform_async(count=3)  # Sidekiq's jobs take positional arguments only
    assert Walk.perform_async(3, 0.5) is not None
