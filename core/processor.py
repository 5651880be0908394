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
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from .errors import Shutdown
from .job import registry
from .logging import JobLogger, thread_id
from .payload import loads
from .retry import Handled, JobRetry

if TYPE_CHECKING:
    from .config import Config
    from .fetch import Fetcher, UnitOfWork

log = logging.getLogger("kiq")

MAX_BACKOFF = 2.0  # seconds between fetch attempts while Redis is unreachable (0.5, 1, 2, 2, ...)


class RedisOutage:
    """Shared by a worker's threads so an outage is logged once when it starts and once when it ends."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.down_since: float | None = None
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, where: str) -> None:
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
        url = self.config.redis_url or f"the embedded server in {self.config.embedded_dir}"
        context = f"Redis at {url} is unreachable ({where}); retrying with backoff"
        self.config.handle_exception(exc, {"context": context})  # logs it, and error trackers hear of it

    def recovered(self) -> None:
        with self._lock:
            since, self.down_since = self.down_since, None
        if since is not None:
            log.info("Redis is reachable again after %.1f s", time.monotonic() - since)


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
                self.outage.recovered()
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
            job = loads(jobstr)
            if type(job) is not dict or type(job.get("args")) is not list or type(job.get("class")) is not str:
                # no retry could make it runnable, and splatting a non-list "args" would call perform wrongly
                raise ValueError("a job must be a JSON object with a 'class' string and an 'args' list")
        except (ValueError, RecursionError) as exc:
            self._bury(unit, exc)
            return
        self.unit = unit
        self.work = (queue, jobstr, int(time.time()))
        job_logger = self.job_logger
        context = job_logger.prepare(job)
        ack = False
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
            if ack:
                self._acknowledge(unit)
            self.unit = None

    def _run_logged(self, job: dict[str, Any], jobstr: str, queue: str, context: dict[str, Any]) -> None:
        """Job logger and stats (one try block for both: same effect as Sidekiq's two layers, cheaper)."""
        started = time.perf_counter()
        try:
            instance = registry.get(job.get("class", ""))()  # an unknown class is this job's error: retry path
            instance.jid = job.get("jid", "")
            instance.job = job
            args = job["args"]
            with self.retrier.local(instance, jobstr, queue):
                chain = self.config.server_middleware
                if chain.entries:
                    chain.invoke((instance, job, queue), lambda: instance.perform(*args))
                else:
                    instance.perform(*args)
        except Shutdown:
            raise  # requeued: neither processed nor failed
        except BaseException:
            self.failed += 1
            self.processed += 1
            self.job_logger.finish(context, started, failed=True)
            raise
        self.processed += 1
        self.job_logger.finish(context, started, failed=False)

    def _acknowledge(self, unit: UnitOfWork) -> None:
        try:
            unit.acknowledge()
        except Exception as exc:
            self.config.handle_exception(exc, {"context": "acknowledge", "jobstr": unit.job})

    def _bury(self, unit: UnitOfWork, exc: Exception) -> None:
        """Unparseable payload: straight to ``dead`` (no retry could ever parse it) and acknowledged."""
        from .api import DeadSet

        try:
            DeadSet(self.config).kill(unit.job, notify_failure=False)
        except Exception as error:
            self.config.handle_exception(error, {"context": "Internal exception!", "jobstr": unit.job})
            return
        self.config.handle_exception(exc, {"context": "Invalid JSON for job", "jobstr": unit.job})
        self._acknowledge(unit)

    def kill(self) -> None:
        """Raise ``Shutdown`` in this thread (at its next Python bytecode; a blocking C call finishes first)."""
        ident = self.thread.ident
        if ident is not None and self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Shutdown))
