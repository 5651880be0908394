"""The ActiveJob envelope a Sidekiq payload carries, read for a worker and written for ``perform_later``.

A Rails app's ``perform_later`` pushes ``{"class": <wrapper>, "wrapped": "ReportJob", "queue": ...,
"args": [<envelope>]}``; the envelope is ``ActiveJob::Core#serialize``: ``job_class``, ``job_id`` (ActiveJob's own
id, not the jid), ``provider_job_id``, ``queue_name``, ``priority``, ``arguments``, ``executions``,
``exception_executions``, ``locale``, ``timezone``, ``enqueued_at`` (and ``scheduled_at`` from Rails 7.1).
The wrapper is Rails' ``ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper`` (Rails <= 7.1) or Sidekiq's own
``Sidekiq::ActiveJob::Wrapper`` (Sidekiq 7.3+, which keeps ``JobWrapper`` as an alias); the envelope is the same.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from .arguments import decode_arguments
from .errors import ActiveJobError

RAILS_WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
SIDEKIQ_WRAPPER = "Sidekiq::ActiveJob::Wrapper"
WRAPPERS = frozenset({RAILS_WRAPPER, SIDEKIQ_WRAPPER})
IN_MEMORY_KEY = "active_job"  # the decoded Envelope, put in the worker's in-memory job dict (never stored)


class Envelope:
    """What a job run from an ActiveJob payload sees as ``self.active_job``: the envelope's fields as attributes
    (``data`` is all of it, as stored). ``provider_job_id`` is the Sidekiq jid, as Sidekiq's wrapper sets it.
    Read on access: making it costs a worker nothing per job but two slots."""

    __slots__ = ("data", "provider_job_id")

    def __init__(self, data: dict[str, Any], provider_job_id: str | None) -> None:
        self.data = data
        self.provider_job_id = provider_job_id

    job_class = property(lambda self: str(self.data["job_class"]), doc="the Rails job class's name")
    job_id = property(lambda self: self.data.get("job_id"), doc="ActiveJob's id of the job (a UUID; not the jid)")
    queue_name = property(lambda self: self.data.get("queue_name"))
    priority = property(lambda self: self.data.get("priority"))
    executions = property(lambda self: self.data.get("executions") or 0, doc="runs ActiveJob counted before")
    exception_executions = property(lambda self: self.data.get("exception_executions") or {})
    locale = property(lambda self: self.data.get("locale"))
    timezone = property(lambda self: self.data.get("timezone"))
    enqueued_at = property(lambda self: self.data.get("enqueued_at"), doc="ISO 8601 text, as Rails wrote it")
    scheduled_at = property(lambda self: self.data.get("scheduled_at"), doc="ISO 8601 text (Rails 7.1+), or None")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Envelope):
            return NotImplemented
        return (self.data, self.provider_job_id) == (other.data, other.provider_job_id)

    __hash__ = None  # type: ignore[assignment]  # mutable data: no hash, as for a dict

    def __repr__(self) -> str:
        return f"<Envelope {self.job_class} job_id={self.job_id} provider_job_id={self.provider_job_id}>"


def unwrap(job: dict[str, Any]) -> str | None:
    """If ``job`` is an ActiveJob payload: rewrite it in memory (``args``, ``kwargs``, the Envelope) and return the
    job class it runs; None for any other class."""
    if job.get("class") not in WRAPPERS:
        return None
    data = envelope_of(job)
    args, kwargs = decode_arguments(data.get("arguments"))
    job["args"] = args
    if kwargs:
        job["kwargs"] = kwargs
    job[IN_MEMORY_KEY] = Envelope(data, job.get("jid"))
    return str(data["job_class"])


def envelope_of(job: dict[str, Any]) -> dict[str, Any]:
    """The envelope of an ActiveJob payload (its one argument), checked enough to run it."""
    args = job.get("args")
    data = args[0] if type(args) is list and len(args) == 1 else None
    if type(data) is not dict or type(data.get("job_class")) is not str or not data["job_class"]:
        raise ActiveJobError(
            f"a {job.get('class')} payload must have one argument, the ActiveJob envelope with a 'job_class' "
            f"string; got args {args!r:.200}"
        )
    return data


def build(job_class: str, arguments: list[Any], queue: str, priority: int | None, scheduled_at: float | None,
          locale: str, timezone: str) -> dict[str, Any]:  # fmt: skip
    """A new envelope, as ``ActiveJob::Core#serialize`` writes it (Rails 7.1's fields; 6.1 ignores ``scheduled_at``)."""
    envelope: dict[str, Any] = {
        "job_class": job_class,
        "job_id": str(uuid.uuid4()),
        "provider_job_id": None,
        "queue_name": queue,
        "priority": priority,
        "arguments": arguments,
        "executions": 0,
        "exception_executions": {},
        "locale": locale,
        "timezone": timezone,
        "enqueued_at": _iso(datetime.now(UTC)),
    }
    if scheduled_at is not None:
        envelope["scheduled_at"] = _iso(datetime.fromtimestamp(scheduled_at, UTC))
    return envelope


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
