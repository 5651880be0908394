"""``JobRecord``: one job as it sits in Redis (a queue entry or a sorted-set member), read-only accessors.

Times are returned as float epoch seconds, read by Sidekiq 8's rule (``kiq.ext.epoch_seconds``): a JSON float is
seconds (Sidekiq 6.x/7.x, kiq), an integer milliseconds (8.x); a value that is not a time reads as None.
"""

from __future__ import annotations

import base64
import functools
import json
import time
import zlib
from typing import TYPE_CHECKING, Any

from ..config import config_or_default
from ..job_registry import registry
from ..keys import keyspace
from ..payload import epoch_seconds, parse_job, printable

if TYPE_CHECKING:
    from ..config import Config

PAGE_SIZE = 50  # entries read per round trip when iterating a queue or a set


class JobRecord:
    """A job in a queue: ``value`` is the raw JSON, ``item`` the parsed payload ({} when unparseable)."""

    def __init__(self, value: str, queue: str | None = None, config: Config | None = None) -> None:
        self.config = config_or_default(config)
        self.value = value
        self.item: dict[str, Any] = parse_job(value) or {}
        self.queue: str = queue or str(self.item.get("queue", ""))

    def __getitem__(self, key: str) -> Any:
        return self.item.get(key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.klass} jid={self.jid} queue={self.queue}>"

    @property
    def parsed(self) -> bool:
        """False when the raw value is not a JSON object (such a job can only be deleted)."""
        return bool(self.item)

    @property
    def klass(self) -> str:
        return str(self.item.get("class", "unknown"))

    @property
    def display_class(self) -> str:
        """The class name to show: a Rails ActiveJob wrapper shows the job class it wraps."""
        wrapped = self.item.get("wrapped")
        return str(wrapped) if isinstance(wrapped, str) else self.klass

    @property
    def args(self) -> list[Any]:
        return payload_args(self.item)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The job's keyword arguments (``{}`` when it has none, or when another producer wrote a ``kwargs`` field
        that is not an object: that one is left in ``item``, as written)."""
        return payload_kwargs(self.item)

    @functools.cached_property
    def shown(self) -> dict[str, Any]:
        """The payload as kiq shows it: ``item`` with what plugins hide hidden (``shown_job``)."""
        return shown_job(self.item, self.config)

    @property
    def display_args(self) -> list[Any]:
        """The arguments to show: a wrapper's (e.g. an ActiveJob envelope's) as the plugin that unwraps it decodes
        them (``kiq_unwrap_job``, keyword arguments as a trailing dict, Ruby's way), else ``args``; what a plugin
        hides (``kiq_redact_job``: an encrypted argument) is hidden."""
        shown = self.shown
        if self.klass in registry:  # a job of this process: no wrapper
            return payload_args(shown)
        job = dict(shown)
        try:
            if self.config.plugins.hook.kiq_unwrap_job(job=job, config=self.config) is None:
                return payload_args(shown)
        except Exception:  # undecodable: shown as stored (a worker fails it with the error)
            return payload_args(shown)
        kwargs = job.get("kwargs")
        return [*job["args"], kwargs] if kwargs else list(job["args"])

    @property
    def display_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to show: ``kwargs`` with what plugins hide hidden."""
        return payload_kwargs(self.shown)

    @property
    def arguments_line(self) -> str:
        """The arguments as the listings show them: ``display_args`` as JSON, then ``display_kwargs`` as JSON when
        there are some (``[7] {"amount": 5}``)."""
        return display_arguments(self.display_args, self.display_kwargs)

    @property
    def jid(self) -> str | None:
        jid = self.item.get("jid")
        return jid if isinstance(jid, str) else None

    @property
    def enqueued_at(self) -> float | None:
        return epoch_seconds(self.item.get("enqueued_at"))

    @property
    def created_at(self) -> float | None:
        return epoch_seconds(self.item.get("created_at")) or self.enqueued_at

    @property
    def failed_at(self) -> float | None:
        return epoch_seconds(self.item.get("failed_at"))

    @property
    def retried_at(self) -> float | None:
        return epoch_seconds(self.item.get("retried_at"))

    @property
    def discarded_at(self) -> float | None:
        """When a discarded job was discarded (Sidekiq 8.0.8+, kiq: set before the death hooks run)."""
        return epoch_seconds(self.item.get("discarded_at"))

    def unreadable_time(self, field: str) -> str | None:
        """For a payload time that is stored but is no time (another producer's string, a bool, a float in
        milliseconds...): what to show instead of a date, naming the value; None when it is missing or readable."""
        stored = self.item.get(field)
        if stored is None or epoch_seconds(stored) is not None:
            return None
        return f"not a time: {stored!r:.60} (Sidekiq writes float seconds or integer milliseconds)"

    @property
    def error_class(self) -> str | None:
        return self.item.get("error_class")

    @property
    def error_message(self) -> str | None:
        return self.item.get("error_message")

    @property
    def retry_count(self) -> int | None:
        count = self.item.get("retry_count")
        return count if isinstance(count, int) else None

    @property
    def tags(self) -> list[str]:
        tags = self.item.get("tags")
        return tags if isinstance(tags, list) else []

    @property
    def error_backtrace(self) -> list[str] | None:
        """The failure's backtrace lines (stored as base64 of zlib-compressed JSON), or None."""
        raw = self.item.get("error_backtrace")
        if isinstance(raw, list):  # Sidekiq < 6 stored the plain list
            return [str(line) for line in raw]
        if not isinstance(raw, str):
            return None
        try:
            lines = json.loads(zlib.decompress(base64.b64decode(raw)))
        except (ValueError, zlib.error):
            return None
        return [str(line) for line in lines] if isinstance(lines, list) else None

    @property
    def latency(self) -> float:
        """Seconds since the job was enqueued (or created); 0.0 when unknown."""
        return job_latency(self.item)

    def delete(self) -> bool:
        """Remove this job from its queue; False when it was no longer there."""
        redis = self.config.redis
        return bool(redis.lrem(keyspace(redis).queue(self.queue), 1, self.value))

    @property
    def raw(self) -> bytes:
        """The entry's bytes exactly as stored in Redis."""
        return self.value.encode("utf-8", "surrogateescape")

    def as_dict(self) -> dict[str, Any]:
        """The summary the CLI prints with ``--json``: the payload (as shown: ``shown``) plus the queue it sits in."""
        if self.parsed:
            return {"queue": self.queue, **self.shown}
        return {"queue": self.queue, "raw": printable(self.value)}


def shown_job(job: dict[str, Any], config: Config) -> dict[str, Any]:
    """A payload as kiq shows it (the dashboard, the CLI, ``display_args``, a plugin's records): a copy in which every
    ``kiq_redact_job`` implementation hid what must not be shown (e.g. an encrypted argument as ``"[encrypted]"``);
    ``job`` itself when no plugin redacts. The one place where what is shown of a payload is decided."""
    if not config.plugins.hook.kiq_redact_job.get_hookimpls():
        return job
    shown = dict(job)
    config.plugins.notify("kiq_redact_job", job=shown, config=config)
    return shown


def payload_args(item: dict[str, Any]) -> list[Any]:
    """A payload's positional arguments; ``[]`` when its ``args`` is missing or not a list."""
    args = item.get("args")
    return args if isinstance(args, list) else []


def payload_kwargs(item: dict[str, Any]) -> dict[str, Any]:
    """A payload's keyword arguments; ``{}`` when its ``kwargs`` is missing or not an object."""
    kwargs = item.get("kwargs")
    return kwargs if isinstance(kwargs, dict) else {}


def display_arguments(args: list[Any], kwargs: dict[str, Any]) -> str:
    """``args`` as compact JSON, then ``kwargs`` as JSON when there are some; non-ASCII kept, a value JSON cannot
    say (none should be in a payload) as its repr."""
    shown = json.dumps(args, ensure_ascii=False, default=repr)
    return f"{shown} {json.dumps(kwargs, ensure_ascii=False, default=repr)}" if kwargs else shown


def job_latency(item: dict[str, Any]) -> float:
    """Seconds since a job was enqueued (or created, when it has no ``enqueued_at``); 0.0 when unknown."""
    start = epoch_seconds(item.get("enqueued_at")) or epoch_seconds(item.get("created_at"))
    return max(0.0, time.time() - start) if start else 0.0


def latency(oldest: str | None) -> float:
    """A queue's latency: that of its oldest job (0.0 when the queue is empty)."""
    return job_latency(parse_job(oldest) or {}) if oldest is not None else 0.0
