"""Counters and sizes, as Sidekiq's dashboard shows them (Sidekiq's ``Stats``)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from ..config import config_or_default
from ..keys import DEAD, PROCESSES, QUEUES, RETRY, SCHEDULE, keyspace, stat_key
from .records import latency

if TYPE_CHECKING:
    from ..config import Config


class Stats:
    """A snapshot of the counters and sizes Sidekiq's dashboard shows, read in two pipelined round trips
    (the second, over every queue and process, only when ``queues``, ``enqueued`` or ``workers_size`` is read)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config_or_default(config)
        redis = self.config.redis
        keys = keyspace(redis)
        pipe = redis.pipeline(transaction=False)
        pipe.get(keys.key(stat_key("processed")))
        pipe.get(keys.key(stat_key("failed")))
        pipe.zcard(keys.key(SCHEDULE))
        pipe.zcard(keys.key(RETRY))
        pipe.zcard(keys.key(DEAD))
        pipe.scard(keys.key(PROCESSES))
        pipe.lindex(keys.queue("default"), -1)
        processed, failed, scheduled, retries, dead, processes, oldest_default = pipe.execute()
        self.processed = int(processed or 0)
        self.failed = int(failed or 0)
        self.scheduled_size = int(scheduled)
        self.retry_size = int(retries)
        self.dead_size = int(dead)
        self.processes_size = int(processes)
        self.default_queue_latency = latency(oldest_default)
        self._queues: dict[str, int] | None = None
        self._workers_size = 0

    def _read_slow(self) -> dict[str, int]:
        if self._queues is None:
            redis = self.config.redis
            keys = keyspace(redis)
            names = sorted(str(name) for name in redis.smembers(keys.key(QUEUES)) if name)
            identities = sorted(str(identity) for identity in redis.smembers(keys.key(PROCESSES)))
            pipe = redis.pipeline(transaction=False)
            for name in names:
                pipe.llen(keys.queue(name))
            for identity in identities:
                pipe.hget(keys.key(identity), "busy")
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
        redis = self.config.redis
        keys = keyspace(redis)
        for stat in ("processed", "failed"):
            values = redis.mget([keys.key(stat_key(stat, date)) for date in dates]) if dates else []
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
