"""Testing code that pushes jobs, with no Redis (Sidekiq::Testing, Celery's eager mode, Dramatiq's StubBroker).

``fake()`` captures every push (per queue, per class: ``MyJob.jobs``) and ``drain()`` runs the captured jobs in this
process through the real server middleware, the retry rules and the death hooks, so a test sees a retry and a death
as a worker would make them. ``inline()`` runs each job at once, when it is pushed, through the client and server
middleware; its error reaches the code that pushed it. Outside both (or inside ``disable()``), pushes go to Redis.
The pytest fixtures ``kiq_fake`` and ``kiq_inline`` (kiq.testing_pytest, loaded by pytest from kiq's ``pytest11``
entry point) wrap the same context managers.

Neither mode opens a Redis connection for the jobs themselves; a plugin whose middleware calls Redis (unique jobs,
limiters) still needs one.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import sink
from .arguments import call_perform
from .config import Config, config_or_default
from .job_registry import registry
from .payload import loads, parse_payload
from .server.runner import JobRunner, Slot, begin, resume, unwrap
from .testing_worker import Worker

__all__ = ["Fake", "Inline", "Worker", "disable", "fake", "inline", "jobs", "mode"]


class _Unit:
    """A captured job as the server steps see it: acknowledging or requeueing it changes nothing here."""

    __slots__ = ("job", "queue_name")

    def __init__(self, job: str, queue_name: str) -> None:
        self.job = job
        self.queue_name = queue_name

    def acknowledge(self) -> None:
        pass

    def requeue(self) -> None:
        pass


class Fake:
    """What the code under test pushed, and the jobs' fates once drained: ``queues`` (queue → payloads, oldest
    first), ``scheduled`` and ``retries`` (``(at, payload)``), ``dead`` (payloads)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config
        self.queues: dict[str, list[str]] = {}
        self.scheduled: list[tuple[float, str]] = []
        self.retries: list[tuple[float, str]] = []
        self.dead: list[str] = []

    # -- the sink -------------------------------------------------------------------------------------
    def write(self, jobs: list[sink.EncodedJob]) -> None:
        for queue, _, at, data in jobs:
            if at is None:
                self.queues.setdefault(queue, []).append(data)
            else:
                self.scheduled.append((at, data))

    def retry(self, jobstr: str, at: float) -> None:
        self.retries.append((at, jobstr))

    def bury(self, jobstr: str) -> None:
        self.dead.append(jobstr)

    # -- for tests ------------------------------------------------------------------------------------
    def jobs(self, queue: str | None = None, job: type[Any] | str | None = None) -> list[dict[str, Any]]:
        """The pushed jobs waiting to run (queued, then scheduled), as payload dicts; of one queue or one class."""
        name = _wire_name(job)
        waiting = [data for q, items in self.queues.items() if queue in (None, q) for data in items]
        waiting += [data for _, data in sorted(self.scheduled) if queue in (None, loads(data)["queue"])]
        return [found for found in map(loads, waiting) if name in (None, found["class"])]

    def jobs_of(self, name: str) -> list[dict[str, Any]]:
        return self.jobs(job=name)

    @property
    def dead_jobs(self) -> list[dict[str, Any]]:
        return [loads(data) for data in self.dead]

    def drain(self, job: type[Any] | str | None = None, *, retries: bool = True) -> int:
        """Run the waiting jobs (scheduled ones too, whatever their time; of one class if given) until none is
        left, including the jobs they push; with ``retries``, run each failed job's retries at once until it
        succeeds or dies. Returns how many runs there were."""
        runner = JobRunner(config_or_default(self.config))
        runs = 0
        while batch := self._take(_wire_name(job), retries):
            for queue, data in batch:
                _run(runner, _Unit(data, queue))
                runs += 1
        return runs

    def clear(self) -> None:
        self.queues.clear()
        self.scheduled.clear()
        self.retries.clear()
        self.dead.clear()

    def _take(self, name: str | None, retries: bool) -> list[tuple[str, str]]:
        """Remove and return the waiting jobs to run next (``name``'s only, if given)."""
        taken: list[tuple[str, str]] = []
        for queue, items in self.queues.items():
            keep = [data for data in items if name not in (None, loads(data)["class"])]
            taken += [(queue, data) for data in items if name in (None, loads(data)["class"])]
            items[:] = keep
        pending = [*self.scheduled, *(self.retries if retries else [])]
        due = sorted(entry for entry in pending if name in (None, loads(entry[1])["class"]))
        self.scheduled = [entry for entry in self.scheduled if entry not in due]
        self.retries = [entry for entry in self.retries if entry not in due]
        return taken + [(loads(data)["queue"], data) for _, data in due]


class Inline:
    """Runs each pushed job at once, in the pushing thread, through the server middleware; its error propagates to
    the push (no retries). Scheduled jobs run at once too."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config

    def write(self, jobs: list[sink.EncodedJob]) -> None:
        config = config_or_default(self.config)
        for queue, _, _, data in jobs:
            job = parse_payload(data)
            instance = registry.get(job["class"])()
            instance.jid, instance.job = job["jid"], job
            # the arguments read when the job runs: a server middleware may have given it others (kiq.server.runner)
            config.server_middleware.invoke((instance, job, queue), functools.partial(_perform_job, instance, job))

    def retry(self, jobstr: str, at: float) -> None:
        raise AssertionError("inline mode runs no retry layer")  # pragma: no cover - unreachable by design

    def bury(self, jobstr: str) -> None:
        raise AssertionError("inline mode runs no retry layer")  # pragma: no cover - unreachable by design

    def jobs_of(self, name: str) -> list[dict[str, Any]]:
        return []  # inline jobs ran when pushed: none wait


@contextmanager
def fake(config: Config | None = None) -> Iterator[Fake]:
    """Capture pushes in memory for the block (``drain()`` runs them with ``config``, default: the default one)."""
    with _active(Fake(config)) as captured:
        yield captured


@contextmanager
def inline(config: Config | None = None) -> Iterator[Inline]:
    """Run every job when it is pushed, for the block."""
    with _active(Inline(config)) as running:
        yield running


@contextmanager
def disable() -> Iterator[None]:
    """Push to Redis for the block, inside a fake or inline one."""
    previous, sink.current = sink.current, None
    try:
        yield
    finally:
        sink.current = previous


def mode() -> Fake | Inline | None:
    """The testing mode running now (``fake()`` or ``inline()``), None when pushes go to Redis."""
    current = sink.current
    return current if isinstance(current, Fake | Inline) else None


def jobs(queue: str | None = None, job: type[Any] | str | None = None) -> list[dict[str, Any]]:
    """The jobs the running ``fake()`` captured (``[]`` outside one)."""
    current = sink.current
    return current.jobs(queue, job) if isinstance(current, Fake) else []


@contextmanager
def _active(mode: Any) -> Iterator[Any]:
    previous, sink.current = sink.current, mode
    try:
        yield mode
    finally:
        sink.current = previous


def _wire_name(job: type[Any] | str | None) -> str | None:
    if job is None or isinstance(job, str):
        return job
    return str(getattr(job, "kiq_name", None) or getattr(getattr(job, "job_class", None), "kiq_name", job))


def _run(runner: JobRunner, unit: _Unit) -> None:
    """One job through the worker's own steps (parse, retry rules, middleware, logging), sync or async."""
    job = runner.parse(unit)
    if job is None:
        return  # no worker could run it: it is in ``dead`` now
    steps = runner.steps(Slot(), unit, job, registry.find(job["class"]) or unwrap(runner.config, job))
    call = begin(steps)
    if call is None:
        return
    try:
        result = _perform(*call)
    except BaseException as exc:
        resume(steps, error=exc)
    else:
        resume(steps, result)


def _perform_job(instance: Any, job: dict[str, Any]) -> Any:
    return _perform(instance, job["args"])


def _perform(instance: Any, args: list[Any]) -> Any:
    result = call_perform(instance, args)
    return _await(result) if inspect.isawaitable(result) else result


def _await(awaitable: Any) -> Any:
    """An async job's coroutine, run to its end here: on a new event loop, in a thread of its own if this thread
    already runs one (a test that pushes from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_completed(awaitable))
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, asyncio.run(_completed(awaitable))))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


async def _completed(awaitable: Any) -> Any:
    return await awaitable
