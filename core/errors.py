"""The exceptions kiq raises on purpose."""

from __future__ import annotations

from collections.abc import Callable

import redis


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
