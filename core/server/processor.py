"""A Processor is one thread that fetches a job, runs it through the retry, logging and middleware layers, and
acknowledges it with Sidekiq 7's rules.

Nesting per job (Sidekiq's dispatch): job log context → ``JobRetry.global_`` → job logger + stats → resolve the
class in the registry → ``JobRetry.local`` → server middleware → ``perform``. A job is acknowledged when it
finished or when the retry layer recorded its failure (``Handled``); not on ``Shutdown`` (it was requeued) and
not on an unexpected internal error (e.g. Redis down while recording the retry), so a reliable fetcher can
recover it.

The hot path allocates little and makes no Redis calls besides the fetch: counters are plain ints owned by
this thread (the heartbeat sums them), and the ``<identity>:work`` entry is a tuple the heartbeat writes out.
"""

from __future__ import annotations

import ctypes
import inspect
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from ..errors import InvalidPayload, Shutdown
from ..job_registry import registry
from ..logging import JobLogger, thread_id
from ..payload import parse_payload
from . import acknowledgement, dead
from .retry import Handled, JobRetry

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import Fetcher, UnitOfWork

log = logging.getLogger("kiq")

MAX_BACKOFF = 2.0  # seconds between fetch attempts while Redis is unreachable (0.5, 1, 2, 2, ...)


class RedisOutage:
    """Shared by a worker's threads so an outage is logged once when it starts and once when it ends. ``where``
    (fetch, heartbeat) tells which work failed: only that work succeeding again ends it (at maxmemory, fetches
    work while the heartbeat's writes are refused)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.down_since: float | None = None
        self._where = ""
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, where: str) -> None:
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since, self._where = time.monotonic(), where
        url = self.config.redis_url or f"the embedded server in {self.config.embedded_dir}"
        context = f"Redis at {url} {describe_redis_error(exc)} ({where}); retrying with backoff"
        # one line: the message says it all, and a chained traceback of a refused connection helps no one
        self.config.handle_exception(exc, {"context": context}, traceback=False)

    def recovered(self, where: str) -> None:
        with self._lock:
            if where != self._where:
                return
            since, self.down_since = self.down_since, None
        if since is not None:
            log.info("Redis works again (%s) after %.1f s", where, time.monotonic() - since)


def describe_redis_error(exc: BaseException) -> str:
    """What a failure says about Redis, for the log line: unreachable, out of memory, or the error itself."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return "is unreachable"
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return "is out of memory (maxmemory reached: it refuses commands that need memory)"
    return f"failed with {type(exc).__name__}: {exc}"


class Processor:
    """One worker thread of a capsule."""

    def __init__(self, config: Config, fetcher: Fetcher, stopping: threading.Event, outage: RedisOutage,
                 name: str) -> None:  # fmt: skip
        self.config = config
        self.fetcher = fetcher
        self.stopping = stopping
        self.outage = outage
        self.retrier = JobRetry(config)
        self.job_logger = JobLogger()
        self.processed = 0  # written by this thread only; the heartbeat reads and sums them
        self.failed = 0
        self.unit: UnitOfWork | None = None  # the job in flight, requeued by a hard shutdown
        self.acknowledgement = acknowledgement.JobAcknowledgement()
        self.work: tuple[str, str, int] | None = None  # (queue, raw job, run_at) for ``<identity>:work``
        self.tid = ""
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        self.tid = thread_id()
        try:
            while not self.stopping.is_set():
                unit = self.fetch()
                if unit is not None:
                    self.process(unit)
        except Shutdown:
            pass  # a hard shutdown reached this thread between jobs: nothing was in flight

    def fetch(self) -> UnitOfWork | None:
        failures = 0
        while True:
            try:
                unit = self.fetcher.retrieve_work()
            except Exception as exc:
                self.outage.failed(exc, "fetch")
                failures += 1
                if self.stopping.wait(min(MAX_BACKOFF, 0.25 * 2**failures)):
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
        jobstr = unit.job
        queue = unit.queue_name
        try:
            job = parse_payload(jobstr)
        except InvalidPayload as exc:
            self._bury(unit, exc)  # no retry could make it runnable
            return
        self.unit = unit
        self.work = (queue, jobstr, int(time.time()))
        job_logger = self.job_logger
        context = job_logger.prepare(job)
        ack = False
        if acknowledgement.current.get() is not self.acknowledgement:  # once per thread that runs jobs
            acknowledgement.current.set(self.acknowledgement)
        self.acknowledgement.begin()
        try:
            with self.retrier.global_(jobstr, queue):
                self._run_logged(job, jobstr, queue, context)
            ack = True
        except Handled as handled:
            ack = True  # the retry layer recorded the failure (retry, dead or discarded)
            error = handled.__cause__ or handled
            self.config.handle_exception(error, {"context": "Job raised exception", "job": job, "queue": queue})
        except Shutdown:
            pass  # a hard shutdown requeued this job: not finished, not acknowledged
        except BaseException as exc:
            # got past the retry layer (e.g. Redis down while recording a retry): not acknowledged, so a
            # reliable fetcher can give it back; the thread keeps working
            self.config.handle_exception(exc, {"context": "Internal exception!", "job": job, "jobstr": jobstr})
        finally:
            self.work = None
            job_logger.clear()
            self.acknowledgement.end(self._acknowledge if ack else None, unit)
            self.unit = None

    def _run_logged(self, job: dict[str, Any], jobstr: str, queue: str, context: dict[str, Any]) -> None:
        """Job logger and stats (one try block for both: same effect as Sidekiq's two layers, cheaper)."""
        started = time.perf_counter()
        try:
            instance = registry.get(job["class"])()  # an unknown class is this job's error: retry path
            instance.jid = job.get("jid", "")
            instance.job = job
            args = job["args"]
            with self.retrier.local(instance, jobstr, queue):
                chain = self.config.server_middleware
                if chain.entries:
                    chain.invoke((instance, job, queue), lambda: _perform(instance, args))
                else:
                    _perform(instance, args)
        except Shutdown:
            raise  # requeued: neither processed nor failed
        except BaseException:
            self.failed += 1
            self.processed += 1
            self.job_logger.finish(context, started, failed=True)
            raise
        self.processed += 1
        failure = self.acknowledgement.failure  # a failure a plugin handled (kiq.report_failure): no retry, but failed
        if failure is not None:
            self.failed += 1
        self.job_logger.finish(context, started, failed=failure is not None, reason=failure)

    def _acknowledge(self, unit: UnitOfWork) -> None:
        try:
            unit.acknowledge()
        except Exception as exc:
            self.config.handle_exception(exc, {"context": "acknowledge", "jobstr": unit.job})

    def _bury(self, unit: UnitOfWork, exc: InvalidPayload) -> None:
        """An unrunnable payload: straight to ``dead`` as it was stored (bytes included), and acknowledged."""
        try:
            dead.bury(self.config, unit.job)
        except Exception as error:
            self.config.handle_exception(error, {"context": "Internal exception!", "jobstr": unit.job})
            return
        self.config.handle_exception(
            exc, {"context": "Invalid job payload, moved to the dead set", "queue": unit.queue_name}
        )
        self._acknowledge(unit)

    def kill(self) -> None:
        """Raise ``Shutdown`` in this thread (at its next Python bytecode; a blocking C call finishes first)."""
        ident = self.thread.ident
        if ident is not None and self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Shutdown))


def _perform(instance: Any, args: list[Any]) -> None:
    result = instance.perform(*args)
    if result is not None and inspect.iscoroutine(result):
        result.close()  # never awaited: closing it here keeps Python from warning about it later
        raise TypeError(
            f"{type(instance).__qualname__}.perform returned a coroutine: async jobs are not supported yet, so it "
            "did not run; call asyncio.run(...) inside a plain def perform"
        )
