"""A queue (its list, ``queue:<name>`` on a standalone server) as Sidekiq's API sees it: size, latency, its jobs,
clear; and pause."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..config import config_or_default
from ..errors import ConfigError
from ..job_writes import forget_listed
from ..keys import PAUSED, QUEUES, keyspace
from ..paused_queues import is_paused, pause, unpause
from .records import PAGE_SIZE, JobRecord, latency

if TYPE_CHECKING:
    from ..config import Config


class Queue:
    """One queue (its list: ``key``). Iterates newest first, as Sidekiq does; the oldest job runs next."""

    def __init__(self, name: str = "default", config: Config | None = None) -> None:
        self.name = name
        self.config = config_or_default(config)

    @classmethod
    def all(cls, config: Config | None = None) -> list[Queue]:
        """Every known queue (the ``queues`` set) and every paused one (a paused queue stays listed while empty, so it
        can be seen and unpaused), by name."""
        config = config_or_default(config)
        keys = keyspace(config.redis)
        names = config.redis.sunion([keys.key(QUEUES), keys.key(PAUSED)])
        return [cls(str(name), config) for name in sorted(names) if name]

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    @property
    def key(self) -> str:
        """The queue's list (``kiq.ext.Keyspace.queue``) on this config's Redis."""
        return keyspace(self.config.redis).queue(self.name)

    @property
    def size(self) -> int:
        return int(self.config.redis.llen(self.key))

    def __len__(self) -> int:
        return self.size

    @property
    def latency(self) -> float:
        """Seconds since the oldest job in the queue was enqueued; 0.0 when the queue is empty."""
        oldest: str | None = self.config.redis.lindex(self.key, -1)  # type: ignore[assignment]
        return latency(oldest)

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

    def page(self, start: int, count: int) -> list[JobRecord]:
        """``count`` jobs from position ``start`` (0: the newest): one ``LRANGE``, whatever the queue's size."""
        if count <= 0 or start < 0:
            return []
        entries = self.config.redis.lrange(self.key, start, start + count - 1)
        return [JobRecord(str(entry), self.name, self.config) for entry in entries]

    def group(self, name: str) -> Any:
        """The job group ``name`` of this queue (its waiting jobs, concurrency, pause), as the plugin with job groups
        has it (``kiq_queue_group``; the shipped one: ``plugins = ["groups"]``)."""
        handle = self.config.plugins.hook.kiq_queue_group(queue=self.name, name=name, config=self.config)
        if handle is None:
            raise ConfigError(
                f"Queue({self.name!r}).group({name!r}): no plugin has job groups; enable the groups plugin "
                "(plugins = ['groups'] in the settings, or config.add_plugin('groups'))"
            )
        return handle

    @property
    def paused(self) -> bool:
        """Whether the workers leave this queue alone for now (``pause()``)."""
        return is_paused(self.config.redis, self.name)

    def pause(self) -> bool:
        """Stop every worker taking jobs from this queue, within a second; pushes go on and the jobs wait.
        True if it was not paused yet. The jobs already taken run to their end."""
        return pause(self.config.redis, self.name)

    def unpause(self) -> bool:
        """Let the workers take jobs from this queue again, within a second; True if it was paused."""
        return unpause(self.config.redis, self.name)

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid (a linear scan, as in Sidekiq), or None."""
        return next((record for record in self if record.jid == jid), None)

    def clear(self) -> int:
        """Delete every job in the queue and forget the queue; returns how many jobs there were."""
        redis = self.config.redis
        keys = keyspace(redis)
        apart = keys.slots == "queue"  # the list and the ``queues`` set lie in two slots: no transaction takes both
        if apart:  # forgotten first: forgotten after, a push in between would leave its job in an unlisted queue
            redis.srem(keys.key(QUEUES), self.name)
        pipe = redis.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.unlink(self.key)
        if not apart:
            pipe.srem(keys.key(QUEUES), self.name)
        cleared = int(pipe.execute()[0])
        forget_listed(self.name)  # the next push lists it again
        return cleared
