"""Enqueue Rails jobs from Python: ``perform_later("ReportJob", 7, when=date(2026, 11, 25), queue="reports")``.

The payload is what Rails' Sidekiq adapter pushes (kiq.plugins.activejob.envelope), so a Rails worker runs it as
if Rails had enqueued it; the arguments are serialized by ActiveJob's rules (kiq.plugins.activejob.arguments).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from typing import Any

import kiq
import kiq.ext

from .arguments import encode_arguments
from .envelope import build
from .settings import RAILS, WRAPPER

DEFAULT_QUEUE = "default"  # ActiveJob's queue_name when the job class sets none


class ActiveJobSetter:
    """A Rails job class by name and the options of its next enqueue (ActiveJob's ``ConfiguredJob``):
    ``job("ReportJob").set(wait=60, priority=5).perform_later(7)``."""

    def __init__(self, job_class: str, options: dict[str, Any] | None = None, config: kiq.Config | None = None) -> None:
        if not isinstance(job_class, str) or not job_class:
            raise kiq.InvalidJobError(f"name a Rails job class by its constant, e.g. 'ReportJob'; got {job_class!r}")
        self.job_class = job_class
        self.options = dict(options or {})
        self.config = config

    def set(self, *, wait: float | timedelta | None = None, wait_until: datetime | float | None = None,
            queue: str | None = None, priority: int | None = None, locale: str | None = None,
            timezone: str | None = None, **sidekiq_options: Any) -> ActiveJobSetter:  # fmt: skip
        """ActiveJob's ``set``: ``wait`` (seconds or timedelta) or ``wait_until`` (aware datetime or epoch seconds),
        ``queue``, ``priority`` (in the envelope), ``locale``/``timezone`` (default ``"en"``/``"UTC"``); other
        keywords are Sidekiq options of the payload (``retry=5``, ``backtrace=True``)."""
        if wait is not None and wait_until is not None:
            raise ValueError("set() takes wait or wait_until, not both")
        given = {"wait": wait, "wait_until": wait_until, "queue": queue, "priority": priority, "locale": locale,
                 "timezone": timezone, **sidekiq_options}  # fmt: skip
        options = {**self.options, **{key: value for key, value in given.items() if value is not None}}
        return ActiveJobSetter(self.job_class, options, self.config)

    def perform_later(self, *args: Any, **kwargs: Any) -> str | None:
        """Enqueue the job with these arguments (keyword arguments reach Ruby as keywords); returns the jid."""
        return kiq.Client(self.config).push(self.payload(args, kwargs))

    @property
    def aio(self) -> AsyncActiveJobSetter:
        """``await job("ReportJob").aio.perform_later(...)``: the same, for asyncio code."""
        return AsyncActiveJobSetter(self)

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The Sidekiq payload Rails' adapter would push for ``perform_later(*args, **kwargs)``."""
        config = self.config or kiq.default_config()
        options = dict(self.options)
        at = _scheduled_at(options.pop("wait", None), options.pop("wait_until", None))
        queue = str(options.pop("queue", DEFAULT_QUEUE))
        arguments = encode_arguments(args, kwargs, decimal_serializer=_setting(config, RAILS) != "6.1")
        envelope = build(self.job_class, arguments, queue, options.pop("priority", None), at,
                         options.pop("locale", "en"), options.pop("timezone", "UTC"))  # fmt: skip
        payload = {"retry": True, **options, "class": _setting(config, WRAPPER), "wrapped": self.job_class,
                   "queue": queue, "args": [envelope]}  # fmt: skip
        if at is not None:
            payload["at"] = at
        return payload


class AsyncActiveJobSetter:
    """An ``ActiveJobSetter``'s pushes for asyncio code."""

    def __init__(self, setter: ActiveJobSetter) -> None:
        self.setter = setter

    async def perform_later(self, *args: Any, **kwargs: Any) -> str | None:
        return await kiq.AsyncClient(self.setter.config).push(self.setter.payload(args, kwargs))


def job(job_class: str, config: kiq.Config | None = None) -> ActiveJobSetter:
    """A Rails job class by name, to ``set(...)`` and ``perform_later`` (``config``: another than the default)."""
    return ActiveJobSetter(job_class, config=config)


def perform_later(job_class: str, *args: Any, queue: str | None = None, **kwargs: Any) -> str | None:
    """Enqueue the Rails job ``job_class`` on the default config: ``perform_later("ReportJob", 7, "x",
    when=date(2026, 11, 25), queue="reports")``. ``queue`` is the queue, not a keyword argument of the job (use
    ``job(name).perform_later(queue=...)`` for one named so)."""
    return job(job_class).set(queue=queue).perform_later(*args, **kwargs)


def _scheduled_at(wait: float | timedelta | None, wait_until: datetime | float | None) -> float | None:
    if isinstance(wait, timedelta):
        wait = wait.total_seconds()
    if isinstance(wait_until, datetime):
        if wait_until.utcoffset() is None:
            raise ValueError(f"wait_until={wait_until!r} has no time zone; pass an aware datetime or epoch seconds")
        wait_until = wait_until.timestamp()
    if wait is not None:
        return time.time() + float(wait)
    return None if wait_until is None else float(wait_until)


def _setting(config: kiq.Config, setting: kiq.ext.Setting) -> Any:
    """The plugin's setting in ``config``; when the plugin is not enabled there (enqueueing needs no worker-side
    plugin), its ``KIQ_*`` variable, else its default: the environment is read leniently, so without this a
    ``KIQ_ACTIVEJOB_RAILS=6.1`` would be ignored in silence."""
    try:
        return config.get(setting.name)
    except kiq.ConfigError:
        variable = f"KIQ_{setting.name.upper()}"
        raw = os.environ.get(variable)
        if raw is None:
            return setting.default
        try:
            return setting.parse(raw)
        except ValueError as exc:
            raise kiq.ConfigError(f"{variable}={raw!r}: {exc}") from None
