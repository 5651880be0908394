"""The middleware that records job lifecycles, and the business-failure exception.

Status writes can reach the database out of order (several worker processes, each with its own batching
writer, and a database outage in between), so each carries a version: ``run * 4 + phase``, where ``run`` counts
the executions of the job (1 on the first, then 1 + 1 per retry, derived from Sidekiq's ``retry_count``) and
phase is 1 for working, 2 for the outcome of that run and 3 for death. The database keeps the highest version,
so the stored status converges to the latest one whatever the order of arrival.

A job tracked on its own (``track: True``) is readable as ``enqueued`` from the moment its push returns: the push
waits (up to PUSH_WAIT, not at all during a database outage) for the batch writer to commit its row, woken at once.

A job's outcome (finished, failed, error) is written before the job leaves Redis: the middleware holds the job's
acknowledgement (``kiq.ext.hold_acknowledgement``) until the writer has committed that status. With reliable fetch a
worker killed in between leaves the job in its working list, so it runs again and its status converges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiq import ClientMiddleware, ServerMiddleware, Shutdown, Wrapper
from kiq.api import shown_job
from kiq.ext import hold_acknowledgement, report_failure
from kiq.plugins.results import tracked_result

from .statuses import ENQUEUED, ERROR, FAILED, FINISHED, WORKING
from .writer import Update, Writer

if TYPE_CHECKING:
    import redis

    from kiq import Config, Job

    from .plugin import TrackingPlugin

WORKING_PHASE, OUTCOME_PHASE, DEATH_PHASE = 1, 2, 3
# Seconds a push of a job tracked on its own waits for its ``enqueued`` row, so that a poll right after the push
# finds it (one transaction, shared by concurrent pushes); a slow database delays pushes by at most this much.
# seconds a push waits for its row: a slow commit (SQLite took over 1 s on a loaded machine) keeps the promise; a
# hung database costs one push this wait, and later pushes none until a write succeeds
PUSH_WAIT = 5.0
MAX_ERROR = 2000


class TaskFailure(Exception):
    """Raise in a job for a business failure: the job is recorded as ``failed`` with this message and is not
    retried; the worker logs it as ``fail`` and counts it as failed (``kiq.ext.report_failure``)."""


def is_tracked(job: dict[str, Any]) -> bool:
    """Jobs of a task are always tracked; others when their options say ``track: True``."""
    return "task_id" in job or job.get("track") is True


def run_number(job: dict[str, Any]) -> int:
    """Which execution of the job a payload starts: Sidekiq sets ``retry_count`` 0 on the first failure."""
    count = job.get("retry_count")
    return count + 2 if isinstance(count, int) else 1


def describe(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, TaskFailure) else f"{type(exc).__name__}: {exc}"
    return text[:MAX_ERROR]


def params_of(job: dict[str, Any], config: Config) -> Any:
    """What an event keeps of a job's arguments, as kiq shows them (``kiq.api.shown_job``: an encrypted argument as
    ``"[encrypted]"``): its ``args``; for a job with keyword arguments, ``{"args": [...], "kwargs": {...}}``."""
    shown = shown_job(job, config)
    kwargs = shown.get("kwargs")
    return {"args": shown.get("args"), "kwargs": kwargs} if kwargs else shown.get("args")


def job_update(job: dict[str, Any], status: str, version: int, config: Config, **fields: Any) -> Update:
    return Update(
        job_id=str(job["jid"]),
        task_id=job.get("task_id"),
        job_class=str(job.get("class", "")),
        params=params_of(job, config),
        status=status,
        version=version,
        at=time.time(),
        **fields,
    )


@dataclass
class Reservation:
    """The jids ``create_task`` wrote events for, by the identity of each job's argument list."""

    task_id: str
    jids: dict[int, str]


reservation: ContextVar[Reservation | None] = ContextVar("kiq_tracking_reservation", default=None)


class TrackingClientMiddleware(ClientMiddleware):
    """Gives the jobs of a task being created the jids their events were written under (it is the outermost
    client middleware, so it sees every job), and records ``enqueued`` for jobs tracked on their own."""

    def __init__(self, plugin: TrackingPlugin) -> None:
        self.plugin = plugin

    def call(self, job_class: type[Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> Wrapper:
        reserved = reservation.get()
        if reserved is not None and job.get("task_id") == reserved.task_id:
            job["jid"] = reserved.jids.get(id(job["args"]), job["jid"])
        elif job.get("track") is True and "task_id" not in job:
            writer = self.plugin.tracker(self.config).writer
            written = writer.submit_now(job_update(job, ENQUEUED, 0, self.config))
            bulk = bulk_pushes.get()
            if bulk is not None:  # waited for together, once the whole bulk is pushed
                bulk.append((writer, written))
            else:
                writer.wait_written(written, PUSH_WAIT)
        yield


# Where the ``enqueued`` rows of a push_bulk's tracked jobs are waited for together (tracking's kiq_push_bulk)
bulk_pushes: ContextVar[list[tuple[Writer, threading.Event | None]] | None] = ContextVar(
    "kiq_tracking_bulk_pushes", default=None
)


@contextmanager
def rows_written_after_bulk() -> Iterator[None]:
    """Around a push_bulk: the tracked jobs' rows are written (or PUSH_WAIT has passed) when it returns."""
    waits: list[tuple[Writer, threading.Event | None]] = []
    token = bulk_pushes.set(waits)
    try:
        yield
    finally:
        bulk_pushes.reset(token)
        deadline = time.monotonic() + PUSH_WAIT
        for writer, written in waits:
            writer.wait_written(written, max(0.0, deadline - time.monotonic()))


class TrackingServerMiddleware(ServerMiddleware):
    """Records working → finished / failed / enqueued-again-after-an-error; stops ``TaskFailure`` here so the
    retrier never sees it, and reports it to the worker as the job's failure."""

    def __init__(self, plugin: TrackingPlugin) -> None:
        self.plugin = plugin

    def call(self, job_instance: Job, job: dict[str, Any], queue: str) -> Wrapper:
        if not is_tracked(job):
            try:
                yield
            except TaskFailure as exc:
                report_failure(f"{type(exc).__name__}: {exc}")
            return
        submit = self.plugin.tracker(self.config).writer.submit
        run = run_number(job)
        submit(job_update(job, WORKING, run * 4 + WORKING_PHASE, self.config, attempts=run))
        dropped: list[str] = []  # why an inner layer dropped the job unrun (kiq_job_dropped), if it did
        token = dropping.set((job, dropped))
        try:
            value = yield
        except TaskFailure as exc:
            submit(outcome(job, FAILED, run * 4 + OUTCOME_PHASE, self.config, last_error=describe(exc)))
            report_failure(f"{type(exc).__name__}: {exc}")
            return  # handled: a business outcome, not an error to retry
        except Shutdown:  # requeued; it runs again as the same run
            submit(job_update(job, ENQUEUED, run * 4 + WORKING_PHASE, self.config))
            raise
        except BaseException as exc:  # a retry is pending unless the death hook says otherwise
            submit(outcome(job, ENQUEUED, run * 4 + OUTCOME_PHASE, self.config, last_error=describe(exc)))
            raise
        finally:
            dropping.reset(token)
        if dropped:
            submit(dropped_outcome(job, dropped[0], self.config))
        else:
            result = tracked_result(job, value, self.config)  # with the results plugin, for jobs that keep theirs
            submit(outcome(job, FINISHED, run * 4 + OUTCOME_PHASE, self.config, result=result))


# the job the tracking middleware is running in this context, and where a kiq_job_dropped for it leaves its reason
dropping: ContextVar[tuple[dict[str, Any], list[str]] | None] = ContextVar("kiq_tracking_dropping", default=None)


def progress_update(jid: str, done: float, total: float | None) -> Update:
    """A job's ``self.progress(done, total)``, for its event (no status: it changes none)."""
    return Update(jid, progress={"done": done, "total": total, "at": time.time()})


def dropped_outcome(job: dict[str, Any], reason: str, config: Config) -> Update:
    """A job dropped without running (e.g. expired): ``failed``, with the reason as its error."""
    version = run_number(job) * 4 + OUTCOME_PHASE
    return outcome(job, FAILED, version, config, last_error=f"dropped: {reason}"[:MAX_ERROR])


def outcome(job: dict[str, Any], status: str, version: int, config: Config, **fields: Any) -> Update:
    """A status the job's acknowledgement waits for (when a worker runs it): the writer releases it once written."""
    update = job_update(job, status, version, config, **fields)
    release = hold_acknowledgement()
    if release is not None:
        update.callbacks.append(release)
    return update


def death_update(job: dict[str, Any], exc: BaseException | None, config: Config) -> Update | None:
    """The final ``error`` of a job that died (its payload already counts the failed run in retry_count)."""
    if not is_tracked(job) or not isinstance(job.get("jid"), str):
        return None
    count = job.get("retry_count")
    run = count + 1 if isinstance(count, int) else 1
    error = describe(exc) if exc is not None else str(job.get("error_message") or "died")
    return outcome(job, ERROR, run * 4 + DEATH_PHASE, config, last_error=error[:MAX_ERROR])
