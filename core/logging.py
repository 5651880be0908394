"""Worker logging: every line carries the job it belongs to (class, jid, elapsed), in plain text or JSON.

The context lives in a thread-local set by the processor around each job, so a job's own log calls
(``logging.getLogger(__name__).info(...)`` inside ``perform``) carry its jid and class too, as in Sidekiq.
A ``logging.Filter`` on the handler copies the context onto each record in the logging thread, so the
formatters also work behind a ``QueueHandler``.

A job's failed attempt is one WARNING line (``log_job_failure``): its class, jid, error and what happens next (the
retry layer notes it with ``note_failure_outcome``: ``retry 2 of 25 in 31 s``, ``dead``...), with the traceback of
the job's own code: kiq's frames (its processor, middleware and plugins between the thread and ``perform``) are left
out unless the ``kiq`` logger is at DEBUG.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from contextvars import ContextVar
from types import TracebackType
from typing import Any

log = logging.getLogger("kiq")

_local = threading.local()
# the job's log context: a context variable, not a thread-local, so each async job's task (many on one event loop
# thread) has its own, as each processor thread has
_job_context: ContextVar[dict[str, Any] | None] = ContextVar("kiq_job_context", default=None)
_encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
_HANDLER_NAME = "kiq-worker"
# what the retry layer decided for the failure being recorded in this context (read once, by log_job_failure)
_failure_outcome: ContextVar[str | None] = ContextVar("kiq_failure_outcome", default=None)
# the kiq package's files (as the code objects name them: not resolved, an editable install links them)
KIQ_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def thread_id() -> str:
    """A short id of the current thread (Sidekiq's ``tid``: base 36 of thread id xor pid), also used as the
    field name of this thread's entry in ``<identity>:work``."""
    tid: str | None = getattr(_local, "tid", None)
    if tid is None:
        tid = _base36(threading.get_ident() ^ os.getpid())
        _local.tid = tid
    return tid


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


class JobLogger:
    """Sets a job's log context and logs how it ended: ``done``/``fail`` at INFO with ``elapsed`` seconds; ``fail:
    <reason>`` for a job that returned but failed (``kiq.ext.report_failure``), whose error is logged nowhere else.

    ``start`` is logged at DEBUG only: one line per job at INFO halves the per-job logging cost compared to
    Sidekiq's two, and ``done``/``fail`` already carry the duration.
    """

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log

    def prepare(self, job: dict[str, Any]) -> dict[str, Any]:
        """Enter a job's context (kept until ``clear``); returns it so ``finish`` can add to it."""
        context = {"class": job.get("class"), "jid": job.get("jid")}
        tags = job.get("tags")
        if tags:
            context["tags"] = tags
        _job_context.set(context)
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("start")
        return context

    def finish(self, context: dict[str, Any], started: float, failed: bool, reason: str | None = None) -> None:
        logger = self.logger
        if logger.isEnabledFor(logging.INFO):
            context["elapsed"] = round(time.perf_counter() - started, 3)
            message, args = ("fail: %s", (reason,)) if reason is not None else ("fail" if failed else "done", ())
            # a prebuilt record skips logging's caller lookup (a stack walk): the hot path logs every job
            record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, args, None)
            logger.handle(record)

    @staticmethod
    def clear() -> None:
        _job_context.set(None)


def note_failure_outcome(outcome: str) -> None:
    """What becomes of a failed job (``retry 2 of 25 in 31 s``, ``dead``...), for its failure's log line."""
    _failure_outcome.set(outcome)


def log_job_failure(
    exc: BaseException, job: dict[str, Any], logger: logging.Logger = log, traceback: bool = True
) -> None:
    """One WARNING for a failed attempt: class, jid, error and outcome, with the traceback of the job's own frames
    (every frame at DEBUG); ``traceback=False``: the line alone (an unreachable Redis: its message says it all)."""
    outcome = _failure_outcome.get()
    _failure_outcome.set(None)
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None] | None = None
    if traceback:
        frames = exc.__traceback__ if logger.isEnabledFor(logging.DEBUG) else _without_kiq_frames(exc.__traceback__)
        exc_info = (type(exc), exc, frames)
    logger.warning(
        "%s jid=%s failed: %s: %s%s",
        job.get("class"),
        job.get("jid"),
        type(exc).__qualname__,
        exc,
        f"; {outcome}" if outcome else "",
        exc_info=exc_info,
    )


def _without_kiq_frames(traceback: TracebackType | None) -> TracebackType | None:
    """A copy of ``traceback`` without the frames of kiq's own files (the exception itself is not changed: error
    hooks such as Sentry's still get every frame)."""
    kept: list[TracebackType] = []
    while traceback is not None:
        if not traceback.tb_frame.f_code.co_filename.startswith(KIQ_DIR):
            kept.append(traceback)
        traceback = traceback.tb_next
    copy = None
    for frame in reversed(kept):
        copy = TracebackType(copy, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return copy


class ContextFilter(logging.Filter):
    """Copies the thread's id and job context onto each record (as ``kiq_tid`` and ``kiq_context``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.kiq_tid = thread_id()
        record.kiq_context = _job_context.get()  # a new dict per job, so no copy is needed
        return True


class PlainFormatter(logging.Formatter):
    """``2024-05-01T10:00:00.123Z pid=12 tid=2x9k class=Mailer jid=ab12 elapsed=0.01 INFO: done``"""

    def format(self, record: logging.LogRecord) -> str:
        context = getattr(record, "kiq_context", None)
        fields = "".join(f" {key}={value}" for key, value in context.items()) if context else ""
        tid = getattr(record, "kiq_tid", None) or thread_id()
        line = f"{_timestamp(record.created)} pid={record.process} tid={tid}{fields} {record.levelname}: "
        line += record.getMessage()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``pid``, ``tid``, ``lvl``, ``msg``, ``ctx`` (Sidekiq's JSON format),
    plus ``logger`` and, for errors, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "pid": record.process,
            "tid": getattr(record, "kiq_tid", None) or thread_id(),
            "lvl": record.levelname,
            "msg": record.getMessage(),
            "logger": record.name,
        }
        context = getattr(record, "kiq_context", None)
        if context:
            line["ctx"] = context
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode_json(line)


_second_cache: tuple[int, str] = (0, "")  # the last formatted second: most log lines share it


def _timestamp(created: float) -> str:
    """ISO 8601 UTC with milliseconds: ``2024-05-01T10:00:00.123Z``."""
    global _second_cache
    second = int(created)
    cached = _second_cache  # one tuple, read and replaced whole, so threads never see half an update
    if cached[0] != second:
        cached = _second_cache = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{int(created % 1 * 1000):03d}Z"


def setup_logging(level: str = "INFO", fmt: str = "plain") -> logging.Handler:
    """Send all logging (kiq's and the jobs') to stdout in ``fmt`` ("plain" or "json") at ``level``.

    Replaces a handler installed by an earlier call, so calling it again changes the format.
    """
    if fmt not in ("plain", "json"):
        raise ValueError(f"log format must be plain or json, got {fmt!r}")
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    handler = logging.StreamHandler(sys.stdout)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler
