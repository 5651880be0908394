"""The data API (Sidekiq's ``sidekiq/api``): look at and act on queues, scheduled jobs, retries, dead jobs,
processes and running jobs. Everything reads Sidekiq 7's keys, so it works on a Redis shared with Ruby.

Every class takes an optional ``Config`` (default: the process-wide one)::

    from kiq.api import DeadSet, ProcessSet, Queue, RetrySet, Stats

    Stats().processed, Stats().queues                  # counters, {queue: size}
    Queue("default").latency                           # seconds the oldest job has waited
    RetrySet().find_job(jid).retry()                   # enqueue a retry now
    DeadSet().retry_all()
    ProcessSet().quiet()                               # stop fetching in every live worker
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .job_record import JobRecord, epoch, parse_job, resolve_config
from .job_sets import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry
from .process_set import Process, ProcessSet, Work, Workers, cleanup_processes

if TYPE_CHECKING:
    from .config import Config

__all__ = [
    "DeadSet",
    "JobRecord",
    "JobSet",
    "Process",
    "ProcessSet",
    "Queue",
    "RetrySet",
    "ScheduledSet",
    "SortedEntry",
    "Stats",
    "Work",
    "Workers",
    "cleanup_processes",
]

PAGE_SIZE = 50


def _text(value: Any) -> str | None:
    """A reply of the (decode_responses) client as str, or None."""
    return None if value is None else str(value)


def _latency(oldest: str | None) -> float:
    """Seconds since the oldest job of a queue was enqueued (Sidekiq 7: 0.0 when empty or unstamped)."""
    job = parse_job(oldest) if oldest is not None else None
    enqueued_at = epoch(job.get("enqueued_at")) if job is not None else None
    return max(0.0, time.time() - enqueued_at) if enqueued_at is not None else 0.0


class Queue:
    """One queue (``queue:<name>`` list). Iterates newest first, as Sidekiq does; the oldest job runs next."""

    def __init__(self, name: str = "default", config: Config | None = None) -> None:
        self.name = name
        self.config = resolve_config(config)
        self.key = f"queue:{name}"

    @classmethod
    def all(cls, config: Config | None = None) -> list[Queue]:
        """Every known queue (the ``queues`` set), by name."""
        config = resolve_config(config)
        return [cls(str(name), config) for name in sorted(config.redis.smembers("queues"))]

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    @property
    def size(self) -> int:
        return int(self.config.redis.llen(self.key))

    def __len__(self) -> int:
        return self.size

    @property
    def latency(self) -> float:
        """Seconds since the oldest job in the queue was enqueued; 0.0 when the queue is empty."""
        return _latency(_text(self.config.redis.lindex(self.key, -1)))

    def __iter__(self) -> Iterator[JobRecord]:
        redis = self.config.redis
        initial_size = self.size
        deleted = 0
        page = 0
        while True:
            start = page * PAGE_SIZE - deleted  # jobs deleted meanwhile shift the rest towards the head
            entries = redis.lrange(self.key, start, start + PAGE_SIZE - 1)
            if not entries:
                return
            page += 1
            for entry in entries:
                yield JobRecord(str(entry), self.name, self.config)
            deleted = max(0, initial_size - self.size)

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid (a linear scan, as in Sidekiq), or None."""
        return next((record for record in self if record.jid == jid), None)

    def clear(self) -> int:
        """Delete every job in the queue and forget the queue; returns how many jobs there were."""
        pipe = self.config.redis.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.unlink(self.key)
        pipe.srem("queues", self.name)
        return int(pipe.execute()[0])


class Stats:
    """A snapshot of the counters and sizes Sidekiq's dashboard shows, read in two pipelined round trips
    (the second, over every queue and process, only when ``queues``, ``enqueued`` or ``workers_size`` is read)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = resolve_config(config)
        redis = self.config.redis
        pipe = redis.pipeline(transaction=False)
        pipe.get("stat:processed")
        pipe.get("stat:failed")
        pipe.zcard("schedule")
        pipe.zcard("retry")
        pipe.zcard("dead")
        pipe.scard("processes")
        pipe.lindex("queue:default", -1)
        processed, failed, scheduled, retries, dead, processes, oldest_default = pipe.execute()
        self.processed = int(processed or 0)
        self.failed = int(failed or 0)
        self.scheduled_size = int(scheduled)
        self.retry_size = int(retries)
        self.dead_size = int(dead)
        self.processes_size = int(processes)
        self.default_queue_latency = _latency(_text(oldest_default))
        self._queues: dict[str, int] | None = None
        self._workers_size = 0

    def _read_slow(self) -> dict[str, int]:
        if self._queues is None:
            redis = self.config.redis
            names = sorted(str(name) for name in redis.smembers("queues"))
            identities = sorted(str(identity) for identity in redis.smembers("processes"))
            pipe = redis.pipeline(transaction=False)
            for name in names:
                pipe.llen(f"queue:{name}")
            for identity in identities:
                pipe.hget(identity, "busy")
            results = pipe.execute()
            sizes = dict(zip(names, (int(size) for size in results[: len(names)]), strict=True))
            self._queues = dict(sorted(sizes.items(), key=lambda item: (-item[1], item[0])))
            self._workers_size = sum(int(busy or 0) for busy in results[len(names) :])
        return self._queues

    @property
    def queues(self) -> dict[str, int]:
        """Queue name -> size, largest first."""
        return dict(self._read_slow())

    @property
    def enqueued(self) -> int:
        """Jobs waiting in all queues."""
        return sum(self._read_slow().values())

    @property
    def workers_size(self) -> int:
        """Jobs running right now in all processes (the sum of their ``busy``)."""
        self._read_slow()
        return self._workers_size

    busy = workers_size

    def history(self, days: int = 5, start: datetime.date | None = None) -> dict[str, dict[str, int]]:
        """Daily counts ``{"processed": {"YYYY-MM-DD": n}, "failed": {...}}``, newest day first (UTC)."""
        start = start or datetime.datetime.now(datetime.UTC).date()
        dates = [(start - datetime.timedelta(days=offset)).isoformat() for offset in range(days)]
        history: dict[str, dict[str, int]] = {}
        for stat in ("processed", "failed"):
            values = self.config.redis.mget([f"stat:{stat}:{date}" for date in dates]) if dates else []
            history[stat] = {date: int(value or 0) for date, value in zip(dates, values, strict=True)}
        return history

    def as_dict(self) -> dict[str, Any]:
        return {
            "processed": self.processed,
            "failed": self.failed,
            "enqueued": self.enqueued,
            "scheduled_size": self.scheduled_size,
            "retry_size": self.retry_size,
            "dead_size": self.dead_size,
            "processes_size": self.processes_size,
            "workers_size": self.workers_size,
            "default_queue_latency": self.default_queue_latency,
            "queues": self.queues,
        }
