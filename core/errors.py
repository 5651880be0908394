"""The exceptions kiq raises on purpose."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Callable

import redis

MAX_ERROR_MESSAGE = 10_000  # Sidekiq keeps the first 10,000 characters of an error message
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class KiqError(Exception):
    """Base class of every error kiq raises."""


class ConfigError(KiqError, ValueError):
    """A setting is unknown or has a bad value; raised at start-up, never later."""


class InvalidJobError(KiqError, TypeError, ValueError):
    """A job that can never be pushed or run as it is (a bad shape, argument or option); trying again cannot help."""


class InvalidPayload(InvalidJobError):
    """A raw job that no worker could ever run (not UTF-8, not JSON, or not a job's shape); it belongs in the dead
    set, never back in a queue."""


class JobArgumentError(InvalidJobError):
    """A job argument is not native JSON, so it would not survive the trip through Redis."""


class ArgumentError(KiqError, TypeError):
    """A payload's argument that ``perform``'s annotation cannot read (another producer wrote a value of another
    shape, e.g. a non-UUID string for a ``UUID`` parameter): the job fails, through the retry rules, with this
    message naming the parameter and the value."""


class UnknownJobError(KiqError, LookupError):
    """A payload names a job class that is not registered in this process."""


class RegistryError(KiqError, ValueError):
    """Two different jobs claim the same wire name."""


class Shutdown(BaseException):
    """Raised inside a job's thread when a stop's timeout ran out; the job was requeued, so it is not a failure.

    A BaseException, so ``except Exception`` in job code does not swallow it.
    """


class Interrupted(Shutdown):
    """An interruptible job (``kiq.IterableJob``) stopped at a safe point (the worker stopping, its runtime limit)
    after saving its progress: the worker pushes its payload again, without counting a retry, and it resumes. A
    ``Shutdown``, so every layer that knows a requeued job (batch, tracking) knows it runs again; not a failure.

    ``save``: the save Redis refused at the interruption, made by the worker before the re-push (both held until
    Redis takes them); None when the progress is saved."""

    def __init__(self, message: str = "", save: Callable[[], object] | None = None) -> None:
        super().__init__(message)
        self.save = save


class NotReplicated(KiqError):
    """A push was written to the Redis master, but fewer replicas than ``push_replicas`` confirmed it within
    ``push_replicas_timeout``: a failover now could lose it. The job is queued; pushing it again may run it twice."""


class PushBufferFull(KiqError, redis.ConnectionError):
    """Redis is unreachable and the reliable push buffer is full (``reliable_push_limit``): the push was not sent.
    A ``redis.ConnectionError``, as the push raises without reliable push; the jobs held before it are kept."""


class PayloadTooLarge(InvalidJobError):
    """A job's JSON is larger than ``max_payload_bytes``: refused at push, nothing written."""


class JobTimeout(BaseException):
    """A job ran past its time limit (the ``timeout`` option or the ``job_timeout`` setting): raised in its thread,
    or its coroutine was cancelled. A failure, through the retry rules like any error; a BaseException, so
    ``except Exception`` in job code does not swallow it and run on past the limit."""


def error_class(exc: BaseException) -> str:
    """The name to record for an error (Sidekiq's ``error_class``, OpenTelemetry's ``error.type``): bare for
    builtins (``ValueError``), else ``module.QualName``."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def error_message(exc: BaseException, limit: int = MAX_ERROR_MESSAGE) -> str:
    """``str(exc)`` cut to ``limit`` characters and made valid UTF-8; the class name when empty. Never raises: a
    message whose formatting fails (a ``RecursionError`` on a 5,000-deep value in its arguments, a ``__str__`` that
    raises) is Sidekiq's text for it, so no error kiq records while handling a job's outcome can itself fail that
    job again."""
    try:
        message = str(exc) or error_class(exc)
    except Exception:
        return "!!! ERROR MESSAGE THREW AN ERROR !!!"
    return _LONE_SURROGATE.sub("\ufffd", message[:limit])


def describe(value: object, limit: int = 100) -> str:
    """A repr of ``value`` at most ``limit`` characters long, for an error message that names a value: built by
    ``reprlib`` (a few levels deep, a few items each), so a 5,000-deep or 20 MB value costs no more than a small
    one, and never raises (a ``__repr__`` that raises is named as such)."""
    try:
        text = _REPR.repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


_REPR = reprlib.Repr()  # Python 3.11's takes no arguments
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 4, 200, 200, 60
