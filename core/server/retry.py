"""JobRetry: what happens when a job fails (Sidekiq 7's job_retry.rb, same rules and the same Redis data).

The processor wraps every job in two guards (Sidekiq's ``dispatch``)::

    with retrier.global_(jobstr, queue):        # errors before the job exists (e.g. an unknown class)
        job_class = registry.get(name)
        instance = job_class()
        with retrier.local(instance, jobstr, queue):   # the job's errors: its retry_in etc. apply
            run the server middleware and perform()

A failure is recorded in the ``retry`` ZSET (score = when to run again) with Sidekiq's error fields, or,
when retries are exhausted, in the ``dead`` ZSET; then ``Handled`` is raised *from* the job's error, which
tells the processor to acknowledge the job and report the error (``handled.__cause__``) to the error
handlers. When Redis refuses that write (unreachable, maxmemory, read-only, loading), ``RecordRefused`` (a ``Handled``)
carries the write instead: the worker holds it and acknowledges the job once Redis took it (kiq.server.outcomes).
Anything else escaping the guards (``Shutdown``, or another Redis error while recording the failure) means: do
not acknowledge.

Every payload field is untrusted (another producer, a bug or an attacker may have written it): a field the rules
cannot use (``retry_count: "abc"``, ``backtrace: "x"``, ``retry_for: -1``, ``failed_at: "yesterday"``...) is
replaced by a safe default and logged, and if recording still fails for any reason but Redis, the job goes to the
dead set as it was stored. A failing job always ends in ``retry`` or ``dead``.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import random
import time
import traceback
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import redis

from .. import sink
from ..errors import JobTimeout, Shutdown, error_class, error_message
from ..failures import TRANSIENT
from ..keys import RETRY, keyspace, poller_wake
from ..logging import note_failure_outcome
from ..payload import dumps, epoch_seconds, loads, wire_time
from ..pipeline import run_pipeline
from . import dead

if TYPE_CHECKING:
    from ..config import Config

logger = logging.getLogger("kiq.retry")

MAX_COUNT = 2**31  # a retry_count beyond this was not written by a retrier; it would only overflow the delay
MAX_DELAY = 100 * 365 * 24 * 3600  # seconds: a retry_in answer beyond a century is taken as a century
# What counts as a job failure: every Exception, and SystemExit (a job calling sys.exit() failed; it must not
# silently end a processor thread). KeyboardInterrupt/GeneratorExit are not failures of a job.
_FAILURES = (Exception, SystemExit, JobTimeout)


class Handled(Exception):
    """JobRetry recorded this failure (retry, dead set or death hooks); the job's error is ``__cause__``.

    The processor acknowledges the job and passes ``__cause__`` to ``config.handle_exception``.
    """


class RecordRefused(Handled):
    """Redis refused the write that records this failure (kiq.server.outcomes): the worker holds it, makes
    ``write`` once Redis takes it, then acknowledges the job. ``command`` is the same write as a Redis command,
    logged to replay it if the worker stops before it was written. The job's error is ``__cause__``."""

    def __init__(self, write: Callable[[], object], command: list[str], refusal: BaseException) -> None:
        super().__init__(f"job outcome held: {type(refusal).__name__}: {refusal}")
        self.write = write
        self.command = command
        self.refusal = refusal


def _write(write: Callable[[], object], command: list[str]) -> None:
    """Make a write of the failure path; refused by Redis (an outage, maxmemory...), it is ``RecordRefused``."""
    try:
        write()
    except redis.RedisError as exc:
        if not isinstance(exc, TRANSIENT):
            raise
        raise RecordRefused(write, command, exc) from None


class JobRetry:
    """The retry guards of one worker; one instance can be shared by every processor thread."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def global_(self, jobstr: str, queue: str) -> _Guard:
        """Record errors raised outside ``local`` (no job instance), such as an unknown job class."""
        return _Guard(self._global_failure, None, jobstr, queue)

    def local(self, job_instance: Any, jobstr: str, queue: str) -> _Guard:
        """Record errors of the job itself, using the instance's ``retry_in`` and ``retries_exhausted``."""
        return _Guard(self._local_failure, job_instance, jobstr, queue)

    def _global_failure(self, exc: BaseException, _no_instance: None, jobstr: str, queue: str) -> None:
        _raise_if_caused_by_shutdown(exc)
        job = self._load(jobstr, exc)
        # no class to ask (e.g. unknown in this worker): a payload without "retry" gets the client's default, so
        # a job that reaches a worker of another version is retried, then dead, never silently dropped (Sidekiq
        # only runs the death handlers for it)
        if _ruby_truthy(job.setdefault("retry", True)):
            self._record(None, job, jobstr, queue, exc)
        else:  # retry: false: no retry and no dead set, but it died, so the death hooks hear of it
            note_failure_outcome("not retried (retry: false)")
            dead.notify_death(self.config, job, exc)
        raise Handled(f"{error_class(exc)} recorded by JobRetry") from exc

    def _local_failure(self, exc: BaseException, job_instance: Any, jobstr: str, queue: str) -> None:
        """Record the failure and raise ``Handled`` (Sidekiq leaves a job that is not retryable to its global
        handler, which would then not know the class's ``retry`` option; the outcome is the same)."""
        _raise_if_caused_by_shutdown(exc)
        job = self._load(jobstr, exc)
        if job.get("retry") is None:  # a payload from elsewhere may lack it: the class's option applies
            get_options = getattr(type(job_instance), "get_options", None)
            job["retry"] = get_options().get("retry") if get_options is not None else None
        if _ruby_truthy(job["retry"]):
            self._record(job_instance, job, jobstr, queue, exc)
        else:  # retry: false: no retry and no dead set, but it died, so the death hooks hear of it
            note_failure_outcome("not retried (retry: false)")
            dead.notify_death(self.config, job, exc)
        raise Handled(f"{error_class(exc)} recorded by JobRetry") from exc

    def _load(self, jobstr: str, exc: BaseException) -> dict[str, Any]:
        """The payload to record the failure in; one that is not a JSON object goes to dead as stored."""
        try:
            job = loads(jobstr)
        except (ValueError, RecursionError):
            job = None
        if not isinstance(job, dict):
            try:
                self._bury(jobstr, exc, "the payload is not a JSON object")
            except RecordRefused as refused:
                raise refused from exc
            raise Handled(f"{error_class(exc)} recorded by JobRetry") from exc
        return job

    def _record(self, instance: Any, job: dict[str, Any], jobstr: str, queue: str, exc: BaseException) -> None:
        try:
            try:
                self._process_retry(instance, job, queue, exc)
            except (RecordRefused, redis.RedisError):
                raise  # held, or not recorded: the processor does not acknowledge it (a reliable fetcher gives it back)
            except Exception as bug:
                self.config.handle_exception(bug, {"context": "Recording a job's failure failed", "job": job})
                self._bury(jobstr, exc, f"recording its failure failed: {type(bug).__name__}: {bug}")
        except RecordRefused as refused:
            raise refused from exc  # the processor reports the job's error, as for Handled

    def _bury(self, jobstr: str, exc: BaseException, why: str) -> None:
        """The last resort: the job as it was stored goes to the dead set, with the death hooks."""
        logger.error("A failed job goes to the dead set as stored (%s): %.200s", why, jobstr)
        note_failure_outcome("dead")
        _write(lambda: dead.kill(self.config, jobstr, exc), dead.replay_command(self.config, jobstr))

    # -- Sidekiq's process_retry -----------------------------------------------------------------------
    def _process_retry(self, instance: Any, job: dict[str, Any], queue: str, exc: BaseException) -> None:
        """Add the error fields to ``job``, then schedule its retry or let it die."""
        fields = _UntrustedFields(job)
        retry = job["retry"]
        max_attempts = retry if type(retry) is int else self.config.max_retries
        job["queue"] = fields.text("retry_queue") or queue
        job["error_message"] = error_message(exc)
        job["error_class"] = error_class(exc)
        now = time.time()
        stamp = wire_time(now, self.config.sidekiq_wire)
        previous = fields.count("retry_count")
        if previous is not None:
            job["retried_at"] = stamp
            count = job["retry_count"] = previous + 1
        else:
            job["failed_at"] = stamp
            count = job["retry_count"] = 0
        backtrace = fields.backtrace()
        if backtrace is not None:
            lines = _backtrace_lines(exc)
            job["error_backtrace"] = compress_backtrace(lines if backtrace is True else lines[:backtrace])
        retry_for = fields.seconds("retry_for")
        failed_at = fields.time("failed_at") or now
        fields.report()

        if count >= max_attempts:
            return self._retries_exhausted(instance, job, exc)
        if retry_for is not None and failed_at + retry_for < now:
            return self._retries_exhausted(instance, job, exc)
        strategy, delay = self._delay_for(instance, count, exc, job)
        if strategy == "discard":
            note_failure_outcome("discarded (retry_in)")
            return self._discard(job, exc)
        if strategy == "kill":
            return self._retries_exhausted(instance, job, exc)
        jitter = random.randrange(10) * (count + 1)
        # no logging here: a failing log device must not stop the retry from being recorded (Sidekiq #3979)
        at = time.time() + delay + jitter
        note_failure_outcome(f"retry {count + 1} of {max_attempts} in {delay + jitter} s")
        if sink.current is not None:  # kiq.testing
            sink.current.retry(dumps(job), at)
            return None
        member = dumps(job)
        keys = keyspace(self.config.redis)
        key = keys.key(RETRY)
        write = [("ZADD", key, at, member), poller_wake(keys, RETRY, at)]  # the pollers wake when it is due
        _write(lambda: run_pipeline(self.config.redis, write), ["ZADD", key, repr(at), member])
        return None

    def _delay_for(
        self, instance: Any, count: int, exc: BaseException, job: dict[str, Any]
    ) -> tuple[Literal["default", "discard", "kill"], int]:
        """The job's ``retry_in(count, exc, job)`` if it has one and it answers, else ``count**4 + 15``."""
        answer: Any = None
        retry_in = getattr(instance, "retry_in", None)
        if callable(retry_in):
            try:
                answer = retry_in(count, exc, job)
            except Exception as error:
                name = type(instance).__qualname__
                context = f"Failure scheduling retry using `retry_in` of {name}, falling back to the default"
                self.config.handle_exception(error, {"context": context, "job": job})
        if answer == "discard" or answer == "kill":
            return answer, 0
        # as Ruby's to_i: a number is cut to whole seconds; anything else (None, 0, "default") = the default
        if (type(answer) is int or (type(answer) is float and math.isfinite(answer))) and answer >= 1:
            return "default", int(min(answer, MAX_DELAY))
        return "default", count**4 + 15

    def _discard(self, job: dict[str, Any], exc: BaseException) -> None:
        """Sidekiq 8.0.7+'s discard: no retry and no dead set, but ``discarded_at`` is set and the death hooks run,
        so they can tell a discarded job (``discarded_at``) from a dead one and a batch or workflow is not left
        waiting for it."""
        job["discarded_at"] = wire_time(time.time(), self.config.sidekiq_wire)
        dead.notify_death(self.config, job, exc)

    def _retries_exhausted(self, instance: Any, job: dict[str, Any], exc: BaseException) -> None:
        """The job's ``retries_exhausted``, then the dead set (unless ``dead: false``) and the death hooks."""
        answer: Any = None
        hook = getattr(instance, "retries_exhausted", None)
        if callable(hook):
            try:
                answer = hook(job, exc)
            except Exception as error:
                context = {"context": "Error calling retries_exhausted", "job": job}
                self.config.handle_exception(error, context)
        if answer == "discard":
            note_failure_outcome("discarded (retries_exhausted)")
            return self._discard(job, exc)
        if job.get("dead") is False:
            note_failure_outcome("not kept (dead: false)")
            return self._discard(job, exc)
        note_failure_outcome("dead")
        logger.info("Adding dead %s job %s", job.get("class"), job.get("jid"))
        member = dumps(job)

        def record_death() -> None:
            dead.bury(self.config, member)
            # each hook on its own, as Sidekiq's retries_exhausted runs its death handlers; after the dead-set
            # entry, so a held death runs its hooks once, when Redis took it
            dead.notify_death(self.config, job, exc)

        _write(record_death, dead.replay_command(self.config, member))


# The guards are a small class rather than @contextmanager generators: they are entered twice per job, and a
# class costs a third of a generator-based context manager on this path.
class _Guard:
    __slots__ = ("instance", "jobstr", "on_failure", "queue")

    def __init__(self, on_failure: Callable[[BaseException, Any, str, str], None], instance: Any, jobstr: str,
                 queue: str) -> None:  # fmt: skip
        self.on_failure = on_failure
        self.instance = instance
        self.jobstr = jobstr
        self.queue = queue

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and isinstance(exc, _FAILURES) and not isinstance(exc, Handled | Shutdown):
            self.on_failure(exc, self.instance, self.jobstr, self.queue)  # raises Handled, or returns: not retryable


# -- helpers -------------------------------------------------------------------------------------------
class _UntrustedFields:
    """Reads the payload fields the retry rules use; a value they cannot use is replaced (noted, then logged)."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.ignored: list[str] = []

    def _ignore(self, name: str, why: str) -> None:
        self.ignored.append(f"{name}={self.job.get(name)!r:.60} ({why})")

    def text(self, name: str) -> str | None:
        value = self.job.get(name)
        if value is None or (type(value) is str and value):
            return value
        self._ignore(name, "not a non-empty string")
        return None

    def count(self, name: str) -> int | None:
        value = self.job.get(name)
        if value is None or (type(value) is int and 0 <= value < MAX_COUNT):
            return value
        self._ignore(name, "not a count; taken as missing")
        return None

    def seconds(self, name: str) -> float | None:
        value = self.job.get(name)
        if value is None:
            return None
        if type(value) in (int, float) and math.isfinite(value) and value > 0:
            return float(value)
        self._ignore(name, "not a number of seconds > 0")
        return None

    def time(self, name: str) -> float | None:
        value = self.job.get(name)
        if value is None:
            return None
        seconds = epoch_seconds(value)
        if seconds is not None:
            return seconds
        self._ignore(name, "not an epoch time; taken as now")
        return None

    def backtrace(self) -> bool | int | None:
        """True: every line; n: the n innermost; None: no backtrace. Anything else keeps no lines (Ruby's ``to_i``
        of a non-number is 0)."""
        value = self.job.get("backtrace")
        if value is True or not _ruby_truthy(value):
            return True if value is True else None
        if type(value) is int and value >= 0:
            return value
        self._ignore("backtrace", "not true, false or a line count; no lines kept")
        return 0

    def report(self) -> None:
        if self.ignored:
            logger.warning(
                "job %s: payload fields the retry rules cannot use were ignored: %s",
                self.job.get("jid"),
                "; ".join(self.ignored),
            )


def _ruby_truthy(value: Any) -> bool:
    """Ruby's truth, which Sidekiq's payload rules use: only nil and false are false (so ``retry: 0`` means
    "no retries, straight to the dead set", and ``backtrace: 0`` stores an empty backtrace)."""
    return value is not None and value is not False


def _raise_if_caused_by_shutdown(exc: BaseException) -> None:
    """An error raised while a hard shutdown interrupted the job is the shutdown, not a failure."""
    seen = {id(exc)}
    cause = exc.__cause__ if exc.__cause__ is not None else exc.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, Shutdown):
            raise Shutdown("job interrupted by shutdown") from exc
        seen.add(id(cause))
        cause = cause.__cause__ if cause.__cause__ is not None else cause.__context__


def _backtrace_lines(exc: BaseException) -> list[str]:
    """The traceback in Ruby's order and shape (innermost frame first, ``file:line:in `name'``), so that
    ``backtrace: n`` keeps the n frames nearest the error and Sidekiq's Web UI shows them like Ruby's."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [
        f"{frame.filename}:{frame.lineno}:in `{frame.name}'"
        for frame in reversed(frames)
        if frame.filename != __file__  # the guards' own frames, where the error was caught, say nothing
    ]


def compress_backtrace(lines: list[str]) -> str:
    """Sidekiq's ``error_backtrace``: base64(zlib(JSON list of lines))."""
    encoded = json.dumps(lines, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")
    return base64.b64encode(zlib.compress(encoded)).decode("ascii")
