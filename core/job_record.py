"""``JobRecord``: one job as it sits in Redis (a queue entry or a sorted-set member), read-only accessors.

Times are returned as float epoch seconds (Sidekiq 7's format). Sidekiq 8 writes ``enqueued_at`` and
``created_at`` as integer milliseconds; those are converted, so a shared Redis reads the same either way.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from typing import TYPE_CHECKING, Any

from .errors import InvalidJobError
from .payload import loads

if TYPE_CHECKING:
    from .config import Config

# an epoch in milliseconds is larger than any epoch in seconds this side of the year 5000
_MILLIS_THRESHOLD = 100_000_000_000


def epoch(value: Any) -> float | None:
    """A payload timestamp as float epoch seconds (None when missing or not a number)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number / 1000.0 if number > _MILLIS_THRESHOLD else number


class InvalidPayload(InvalidJobError):
    """A raw job that no worker could ever run (not UTF-8, not JSON, or not a job's shape); it belongs in the dead
    set, never back in a queue."""


def is_utf8(value: str) -> bool:
    """False when ``value`` came from bytes that are not UTF-8 (read with surrogateescape, see kiq.redis)."""
    if value.isascii():  # O(1) in CPython: most payloads stop here
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def payload_problem(job: Any) -> str | None:
    """What makes a decoded payload unrunnable, or None: Sidekiq's shape, checked the same way by the processor,
    the poller and reliable-fetch recovery."""
    if type(job) is not dict:
        return "a job must be a JSON object"
    name = job.get("class")
    if type(name) is not str or not name:
        return f"'class' must be a non-empty string, got {name!r:.80}"
    if type(job.get("args")) is not list:
        return f"'args' must be a list, got {job.get('args')!r:.80}"
    queue = job.get("queue", "default")
    if type(queue) is not str or not queue:
        return f"'queue' must be a non-empty string, got {queue!r:.80}"
    jid = job.get("jid", "")
    if type(jid) is not str:
        return f"'jid' must be a string, got {jid!r:.80}"
    return None


def parse_payload(value: str) -> dict[str, Any]:
    """The job of a raw payload; InvalidPayload says why there is none."""
    if not is_utf8(value):
        raise InvalidPayload("the payload is not valid UTF-8")
    try:
        job = loads(value)
    except (ValueError, RecursionError) as exc:
        raise InvalidPayload(f"the payload is not valid JSON: {exc}") from None
    problem = payload_problem(job)
    if problem is not None:
        raise InvalidPayload(problem)
    return job  # type: ignore[no-any-return]


def parse_job(value: str) -> dict[str, Any] | None:
    """The payload dict of a raw job, or None when it is not a JSON object (or not UTF-8)."""
    if not is_utf8(value):
        return None
    try:
        item = loads(value)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


def printable(value: str) -> str:
    """A raw value fit to print or show: bytes that are not UTF-8 as ``\\xff`` escapes."""
    return value if is_utf8(value) else value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def resolve_config(config: Config | None) -> Config:
    if config is not None:
        return config
    from .config import default_config

    return default_config()


class JobRecord:
    """A job in a queue: ``value`` is the raw JSON, ``item`` the parsed payload ({} when unparseable)."""

    def __init__(self, value: str, queue: str | None = None, config: Config | None = None) -> None:
        self.config = resolve_config(config)
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
        args = self.item.get("args")
        return args if isinstance(args, list) else []

    @property
    def jid(self) -> str | None:
        jid = self.item.get("jid")
        return jid if isinstance(jid, str) else None

    @property
    def enqueued_at(self) -> float | None:
        return epoch(self.item.get("enqueued_at"))

    @property
    def created_at(self) -> float | None:
        return epoch(self.item.get("created_at")) or self.enqueued_at

    @property
    def failed_at(self) -> float | None:
        return epoch(self.item.get("failed_at"))

    @property
    def retried_at(self) -> float | None:
        return epoch(self.item.get("retried_at"))

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
        start = self.enqueued_at or self.created_at
        return max(0.0, time.time() - start) if start else 0.0

    def delete(self) -> bool:
        """Remove this job from its queue; False when it was no longer there."""
        return bool(self.config.redis.lrem(f"queue:{self.queue}", 1, self.value))

    @property
    def raw(self) -> bytes:
        """The entry's bytes exactly as stored in Redis."""
        return self.value.encode("utf-8", "surrogateescape")

    def as_dict(self) -> dict[str, Any]:
        """The summary the CLI prints with ``--json``: the payload plus the queue it sits in."""
        if self.parsed:
            return {"queue": self.queue, **self.item}
        return {"queue": self.queue, "raw": printable(self.value)}
