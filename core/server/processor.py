"""A Processor is one thread of a capsule: it fetches a job, runs it through the job runner (kiq.server.runner:
Sidekiq's retry, logging and middleware layers), and acknowledges it with Sidekiq 7's rules; an async job goes to the
capsule's event loop. While Redis refuses job outcomes (the worker's ``OutcomeKeeper``) it fetches nothing; while a
fetch fails it backs off, the outage logged once by the worker's ``RedisOutage`` (kiq.server.outcomes).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backoff import Backoff
from ..errors import Shutdown
from ..job_registry import registry
from ..logging import thread_id
from ..plan import plan_of
from . import interruption
from .outcomes import OutcomeKeeper, RedisOutage
from .runner import JobRunner, Slot, perform, unwrap
from .time_limit import Watchdog, time_limit, timed_out

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import Fetcher, UnitOfWork

FETCH_BACKOFF = (0.5, 2.0)  # seconds between fetch attempts while Redis is unreachable: 0.5, 1, 2, 2, ...


class Processor(JobRunner):
    """One worker thread of a capsule: fetches, and runs sync jobs itself; an async job goes to the capsule's
    event loop (``run_async``), and the thread fetches on as soon as the loop has room for it."""

    def __init__(self, config: Config, fetcher: Fetcher, stopping: threading.Event, outage: RedisOutage,
                 name: str, run_async: AsyncHandOff | None = None,
                 watchdog: Watchdog | None = None, keeper: OutcomeKeeper | None = None) -> None:  # fmt: skip
        super().__init__(config, keeper or OutcomeKeeper(config, outage))
        self.watchdog = watchdog or Watchdog(f"{name}-watchdog")
        self.fetcher = fetcher
        self.stopping = stopping
        self.outage = outage
        self.run_async = run_async
        self.slot = Slot()
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    @property
    def unit(self) -> UnitOfWork | None:
        """The job in flight, requeued by a hard shutdown."""
        return self.slot.unit

    @property
    def work(self) -> tuple[str, str, int] | None:
        return self.slot.work

    @property
    def tid(self) -> str:
        return self.slot.tid

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        self.slot.tid = thread_id()
        try:
            while not self.stopping.is_set():
                unit = self.fetch()
                if unit is not None:
                    self.process(unit)
        except Shutdown:
            pass  # a hard shutdown reached this thread between jobs: nothing was in flight

    def fetch(self) -> UnitOfWork | None:
        if self.keeper.held:  # Redis refuses job outcomes: take no more jobs until it takes them
            self.keeper.wait(self.stopping.is_set, FETCH_BACKOFF[1])
            return None
        backoff: Backoff | None = None  # made on the first failure: the usual fetch allocates nothing
        while True:
            try:
                unit = self.fetcher.retrieve_work()
            except Exception as exc:
                self.outage.failed(exc, "fetch")
                backoff = backoff or Backoff(*FETCH_BACKOFF)
                if self.stopping.wait(backoff.next()):
                    return None
                continue
            if self.outage.down_since is not None:
                self.outage.recovered("fetch")
            if unit is not None and self.stopping.is_set():
                self._requeue(unit)  # fetched while quieting: give it back for another process
                return None
            return unit

    def _requeue(self, unit: UnitOfWork) -> None:
        try:
            unit.requeue()
        except Exception as exc:
            self.config.handle_exception(exc, {"context": "requeue at quiet", "jobstr": unit.job})

    def process(self, unit: UnitOfWork) -> None:
        job = self.parse(unit)
        if job is None:
            return
        job_class = registry.find(job["class"]) or unwrap(self.config, job)
        if job_class is not None and plan_of(job_class).is_async and self.run_async is not None:
            if not self.run_async(unit, job, job_class):
                self._requeue(unit)  # stopping before the loop had room: another process runs it
            return
        steps = self.steps(self.slot, unit, job, job_class)
        try:  # begin and resume, inlined: the hot path
            instance, args = next(steps)
        except StopIteration:
            return  # ended before perform (e.g. a middleware halted the job)
        job = instance.job
        limit = time_limit(job, self.default_time_limit) if self.default_time_limit or "timeout" in job else 0
        if plan_of(type(instance)).interruptible:  # it keeps its limit itself, between items
            limit = interruption.prepare(instance, self.stopping, limit)
        try:
            try:
                result = self._perform_limited(instance, args, limit) if limit else perform(instance, args)
            except BaseException as exc:
                steps.throw(exc)
            else:
                steps.send(result)
        except StopIteration:
            return
        raise RuntimeError("the steps of a job asked to run it twice")

    def _perform_limited(self, instance: Any, args: list[Any], limit: float) -> Any:
        """``perform`` under the watchdog: ``JobTimeout`` if it runs past ``limit`` seconds (kiq.server.time_limit)."""
        watchdog = self.watchdog
        limit_id = watchdog.arm(limit)
        try:
            return perform(instance, args)
        finally:
            if watchdog.disarm(limit_id):
                raise timed_out(instance.job, limit)

    def kill(self) -> None:
        """Raise ``Shutdown`` in this thread (at its next Python bytecode; a blocking C call finishes first)."""
        ident = self.thread.ident
        if ident is not None and self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Shutdown))


# hands an async job over to the capsule's event loop: False when the worker stops before the loop had room for it
AsyncHandOff = Callable[["UnitOfWork", dict[str, Any], type[Any]], bool]
