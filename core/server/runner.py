"""The job runner: one job through Sidekiq's layers, for a processor thread and for a capsule's event loop alike.

Nesting per job (Sidekiq's dispatch): job log context → ``JobRetry.global_`` → job logger + stats → resolve the
class in the registry → ``JobRetry.local`` → server middleware → ``perform``. A job is acknowledged when it
finished or when the retry layer recorded its failure (``Handled``); not on ``Shutdown`` (it was requeued) and
not on an unexpected internal error, so a reliable fetcher can recover it. An outcome Redis refuses (its failure's
record, its acknowledgement) is held by the worker's ``OutcomeKeeper`` and written once Redis takes it
(kiq.server.outcomes); meanwhile the processors fetch nothing.

The steps of a job are one generator that yields once, when it is time to call ``perform``: a processor thread
(kiq.server.processor) calls it, the event loop (kiq.server.aio) awaits it, ``kiq.testing`` runs it inline. The hot
path allocates little and makes no Redis calls: counters are plain ints owned by the runner's one thread (the
heartbeat sums them), so are the per-class metrics (kiq.server.metrics, flushed by the heartbeat), and the
``<identity>:work`` entry is a tuple the heartbeat writes out. The plugins' job observers (``kiq_job_observer``, one
per runner) are told of each attempt without a lock for the same reason.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ..arguments import call_perform
from ..errors import Interrupted, InvalidPayload, Shutdown
from ..failures import TRANSIENT
from ..job_registry import registry
from ..logging import JobLogger
from ..payload import LARGE_TEXT, parse_payload, running_summary
from . import acknowledgement, dead, interruption
from .metrics import Recorder
from .outcomes import Outcome, OutcomeKeeper, RedisOutage
from .retry import Handled, JobRetry, RecordRefused

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import UnitOfWork
    from ..hookspecs import AttemptOutcome, JobObserver


# what a job's steps yield when it is time to run the job: the instance and its arguments; the driver calls
# ``perform`` (a processor thread) or awaits it (the event loop of kiq.server.aio) and sends back the result, or
# throws in what it raised
PerformCall = tuple[Any, list[Any]]
JobSteps = Generator[PerformCall, Any, None]


class Slot:
    """One job in flight: its unit of work (requeued by a hard shutdown), its ``<identity>:work`` entry (queue, raw
    job, run_at) under the key ``tid``, and its acknowledgement. A processor thread has one; the event loop one per
    running coroutine, with the worker's stopping flag (what an interruptible job checks between items; a thread
    hands over its own)."""

    __slots__ = ("acknowledgement", "stopping", "tid", "unit", "work")

    def __init__(self, tid: str = "", stopping: threading.Event | None = None) -> None:
        self.tid = tid
        self.stopping = stopping
        self.unit: UnitOfWork | None = None
        self.work: tuple[str, str, int] | None = None
        self.acknowledgement = acknowledgement.JobAcknowledgement()


class JobRunner:
    """Runs jobs through Sidekiq's layers and counts them; the counters are written by its one thread only (the
    heartbeat reads and sums them). Its ``steps`` serve sync and async jobs alike."""

    def __init__(self, config: Config, keeper: OutcomeKeeper | None = None) -> None:
        self.config = config
        # the worker's one keeper of held outcomes; a runner made on its own (a test's) gets its own
        self.keeper = keeper or OutcomeKeeper(config, RedisOutage(config))
        self.retrier = JobRetry(config)
        self.job_logger = JobLogger()
        self.processed = 0
        self.failed = 0
        self.default_time_limit = config.job_timeout  # read once: a Config attribute costs a lookup per job
        self.metrics = Recorder() if config.metrics else None  # per-class counts, flushed by the heartbeat
        # the plugins' observers of this runner's attempts (kiq_job_observer: e.g. the metrics plugin's tally)
        self.observers: tuple[JobObserver, ...] = tuple(config.plugins.notify("kiq_job_observer", config=config))

    def steps(self, slot: Slot, unit: UnitOfWork, job: dict[str, Any], job_class: type[Any] | None) -> JobSteps:
        """Everything around ``perform`` for one parsed job (``job_class`` from the registry, None if unknown), as a
        generator that yields once, the PerformCall. One generator, not one per layer: this is the hot path."""
        jobstr = unit.job
        queue = unit.queue_name
        slot.unit = unit
        slot.work = (queue, jobstr if len(jobstr) <= LARGE_TEXT else running_summary(job, jobstr), int(time.time()))
        job_logger = self.job_logger
        metrics = self.metrics
        observers = self.observers
        context = job_logger.prepare(job)
        acknowledge: Callable[[UnitOfWork], None] | None = None
        if acknowledgement.current.get() is not slot.acknowledgement:  # once per thread, or per async job's task
            acknowledgement.current.set(slot.acknowledgement)
        slot.acknowledgement.begin()
        try:
            with self.retrier.global_(jobstr, queue):
                # job logger and stats (one try block for both: same effect as Sidekiq's two layers, cheaper)
                started = time.perf_counter()
                if observers:
                    self._started(queue, job)
                try:
                    # an unknown class is this job's error: the retry path
                    instance = (job_class or registry.get(job["class"]))()
                    instance.jid = job.get("jid", "")
                    instance.job = job
                    with self.retrier.local(instance, jobstr, queue):
                        chain = self.config.server_middleware
                        if chain.entries:
                            yield from chain.around((instance, job, queue), _perform_step(instance, job))
                        else:
                            yield instance, job["args"]
                except Shutdown as stopped:
                    if observers:
                        self._finished(
                            queue, job, started, "interrupted" if isinstance(stopped, Interrupted) else "requeued"
                        )
                    raise  # requeued or pushed again: neither processed nor failed
                except BaseException:
                    self.failed += 1
                    self.processed += 1
                    if metrics is not None:
                        metrics.failed(job)
                    if observers:
                        self._finished(queue, job, started, "failed")
                    job_logger.finish(context, started, failed=True)
                    raise
                self.processed += 1
                failure = slot.acknowledgement.failure  # a failure a plugin handled (kiq.ext.report_failure)
                if failure is not None:
                    self.failed += 1
                    if metrics is not None:
                        metrics.failed(job)
                elif metrics is not None:
                    metrics.succeeded(job, started)
                if observers:
                    self._finished(queue, job, started, "done" if failure is None else "failed")
                job_logger.finish(context, started, failed=failure is not None, reason=failure)
            acknowledge = self._acknowledge
        except Handled as handled:
            # the retry layer recorded the failure (retry, dead or discarded), or Redis refused the record: then
            # it is held, and the job acknowledged once Redis took it
            acknowledge = self._hold_record(handled) if isinstance(handled, RecordRefused) else self._acknowledge
            error = handled.__cause__ or handled
            context = {"context": "Job raised exception", "job": job, "queue": queue}
            # a job that failed because Redis is down says so in one line: the outage is logged on its own
            self.config.handle_exception(error, context, traceback=not isinstance(error, TRANSIENT))
        except Interrupted as interrupted:
            # an interruptible job stopped at a safe point, its progress saved: pushed again (no retry counted)
            acknowledge = self._repushed(unit, interrupted.save)
        except Shutdown:
            pass  # a hard shutdown requeued this job: not finished, not acknowledged
        except BaseException as exc:
            # got past the retry layer (e.g. a Redis error that is no outage while recording a retry): not
            # acknowledged, so a reliable fetcher can give it back; the thread keeps working
            self.config.handle_exception(exc, {"context": "Internal exception!", "job": job, "jobstr": jobstr})
        finally:
            slot.work = None
            job_logger.clear()
            slot.acknowledgement.end(acknowledge, unit)
            slot.unit = None

    def _started(self, queue: str, job: dict[str, Any]) -> None:
        for observer in self.observers:
            try:
                observer.started(queue, job)
            except Exception as exc:  # an observer's failure is not the job's
                self.config.plugins.report(exc, f"a job observer failed: {observer!r}")

    def _finished(self, queue: str, job: dict[str, Any], started: float, outcome: AttemptOutcome) -> None:
        seconds = time.perf_counter() - started
        for observer in self.observers:
            try:
                observer.finished(queue, job, seconds, outcome)
            except Exception as exc:
                self.config.plugins.report(exc, f"a job observer failed: {observer!r}")

    def _acknowledge(self, unit: UnitOfWork) -> None:
        try:
            unit.acknowledge()
        except Exception as exc:
            if isinstance(exc, TRANSIENT):
                self.keeper.hold(Outcome(None, None, unit, _acknowledge_unit), exc)
            else:
                self.config.handle_exception(exc, {"context": "acknowledge", "jobstr": unit.job})

    def _repushed(self, unit: UnitOfWork, save: Callable[[], object] | None) -> Callable[[UnitOfWork], None] | None:
        """Push an interrupted job again (kiq.server.interruption), after the save of its progress Redis refused
        (if any); its acknowledgement, held while Redis refuses them; None (not acknowledged: a reliable fetcher
        gives it back) when the push fails otherwise."""
        write, command = interruption.repush_write(self.config, unit, save)
        try:
            write()
        except Exception as exc:
            if isinstance(exc, TRANSIENT):
                refusal = exc
                return lambda held: self.keeper.hold(Outcome(write, command, held, _acknowledge_unit), refusal)
            self.config.handle_exception(exc, {"context": "re-pushing an interrupted job", "jobstr": unit.job})
            return None
        return self._acknowledge

    def _hold_record(self, refused: RecordRefused) -> Callable[[UnitOfWork], None]:
        """The acknowledgement of a job whose failure Redis refused to record: its outcome goes to the keeper."""

        def hold(unit: UnitOfWork) -> None:
            self.keeper.hold(Outcome(refused.write, refused.command, unit, _acknowledge_unit), refused.refusal)

        return hold

    def parse(self, unit: UnitOfWork) -> dict[str, Any] | None:
        """The unit's job, or None when no worker could ever run it: then it is in the dead set, acknowledged."""
        try:
            return parse_payload(unit.job)
        except InvalidPayload as exc:
            self._bury(unit, exc)
            return None

    def _bury(self, unit: UnitOfWork, exc: InvalidPayload) -> None:
        """An unrunnable payload: straight to ``dead`` as it was stored (bytes included), and acknowledged."""
        try:
            dead.bury(self.config, unit.job)
        except Exception as error:
            if isinstance(error, TRANSIENT):  # held: buried and acknowledged once Redis takes it
                write = functools.partial(dead.bury, self.config, unit.job)
                self.keeper.hold(
                    Outcome(write, dead.replay_command(self.config, unit.job), unit, _acknowledge_unit), error
                )
            else:
                self.config.handle_exception(error, {"context": "Internal exception!", "jobstr": unit.job})
            return
        self.config.handle_exception(
            exc, {"context": "Invalid job payload, moved to the dead set", "queue": unit.queue_name}
        )
        self._acknowledge(unit)


def unwrap(config: Config, job: dict[str, Any]) -> type[Any] | None:
    """The job a wrapper payload stands for (``kiq_unwrap_job``, which rewrites ``job`` in memory), or None when no
    plugin unwraps it. What goes wrong here (a plugin's error, an unregistered wrapped name) is raised when the
    class is instantiated, inside the retry layer: that job fails into retry with that error."""
    try:
        name = config.plugins.hook.kiq_unwrap_job(job=job, config=config)
        return None if name is None else registry.get(name)
    except Exception as exc:
        return _unrunnable(exc)


def _unrunnable(error: Exception) -> type[Any]:
    class Unrunnable:
        def __init__(self) -> None:
            raise error

    return Unrunnable


def begin(steps: JobSteps) -> PerformCall | None:
    """Run a job's steps up to ``perform``: what to perform, or None when the job ended before (e.g. a middleware
    halted it)."""
    try:
        return next(steps)
    except StopIteration:
        return None


def resume(steps: JobSteps, result: Any = None, error: BaseException | None = None) -> None:
    """Give a job's steps what ``perform`` returned, or the error it raised; they run to their end."""
    try:
        if error is None:
            steps.send(result)
        else:
            steps.throw(error)
    except StopIteration:
        return
    raise RuntimeError("the steps of a job asked to run it twice")


def _acknowledge_unit(unit: UnitOfWork) -> None:
    unit.acknowledge()


def _perform_step(instance: Any, job: dict[str, Any]) -> Generator[PerformCall, Any, Any]:
    """The innermost layer: ask the driver to run the job, and return what ``perform`` returned. The arguments are
    read here, so a server middleware may give the job others (``job["args"]``, ``job["kwargs"]``: a decrypted
    argument) before its ``yield``, as a client middleware may change what is pushed."""
    return (yield instance, job["args"])


def perform(instance: Any, args: list[Any]) -> Any:
    result = call_perform(instance, args)
    if result is not None and inspect.iscoroutine(result):
        result.close()  # never awaited: closing it here keeps Python from warning about it later
        raise TypeError(
            f"{type(instance).__qualname__}.perform returned a coroutine, which a processor thread does not await, so "
            "it did not run: make perform an async def (kiq awaits those on the worker's event loop), or call "
            "asyncio.run(...) inside it"
        )
    return result
