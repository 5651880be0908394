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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .arguments import decode_arguments
from .errors import ActiveJobError

RAILS_WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
SIDEKIQ_WRAPPER = "Sidekiq::ActiveJob::Wrapper"
WRAPPERS = frozenset({RAILS_WRAPPER, SIDEKIQ_WRAPPER})
IN_MEMORY_KEY = "active_job"  # the decoded Envelope, put in the worker's in-memory job dict (never stored)


@dataclass(frozen=True)
class Envelope:
    """What a job run from an ActiveJob payload sees as ``self.active_job``: the envelope's fields (``data`` is
    all of it, as stored). ``provider_job_id`` is the Sidekiq jid, as Sidekiq's wrapper sets it."""

    job_class: str
    job_id: str | None
    provider_job_id: str | None
    queue_name: str | None
    priority: int | None
    executions: int
    locale: str | None
    timezone: str | None
    enqueued_at: str | None
    scheduled_at: str | None
    data: dict[str, Any] = field(repr=False)


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
    job[IN_MEMORY_KEY] = Envelope(
        job_class=data["job_class"],
        job_id=data.get("job_id"),
        provider_job_id=job.get("jid"),
        queue_name=data.get("queue_name"),
        priority=data.get("priority"),
        executions=data.get("executions") or 0,
        locale=data.get("locale"),
        timezone=data.get("timezone"),
        enqueued_at=data.get("enqueued_at"),
        scheduled_at=data.get("scheduled_at"),
        data=data,
    )
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
