"""``kiq.Queue(q).group(g)``: one job group's waiting jobs, slots in use, concurrency and pause, read and changed in
Redis, so a change reaches every running worker at its next fetch."""

from __future__ import annotations

import kiq
import kiq.ext

from . import scripts
from .keys import base, check_group


class Group:
    """The job group ``name`` of queue ``queue`` (what ``kiq.Queue(queue).group(name)`` returns with the plugin)."""

    def __init__(self, queue: str, name: str, config: kiq.Config) -> None:
        self.queue = queue
        self.name = check_group(name, f"Queue({queue!r}).group")
        self.config = config
        self._base = base(kiq.ext.keyspace(config.redis), queue)

    def __repr__(self) -> str:
        return f"<Group {self.name!r} of queue {self.queue!r}>"

    @property
    def size(self) -> int:
        """Jobs waiting in the group."""
        return int(self.config.redis.llen(self._base + "j:" + self.name))

    @property
    def running(self) -> int:
        """Slots in use: jobs of the group fetched and not finished, over every worker."""
        return int(self.config.redis.hget(self._base + "c", self.name) or 0)

    @property
    def concurrency(self) -> int | None:
        """The most jobs of the group that run at once over every worker (0: no limit); None: the workers'
        ``group_concurrency`` setting."""
        value = self.config.redis.hget(self._base + "x", self.name)
        return None if value is None else int(value)

    @concurrency.setter
    def concurrency(self, limit: int | None) -> None:
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"{self!r}: concurrency must be an int >= 0 (0: no limit) or None, got {limit!r:.40}")
        self._control("limit", "" if limit is None else str(limit))

    @property
    def paused(self) -> bool:
        return bool(self.config.redis.sismember(self._base + "p", self.name))

    def pause(self) -> bool:
        """No job of the group starts until ``unpause()`` (those running finish). True if it was not paused."""
        return bool(self._control("pause"))

    def unpause(self) -> bool:
        """The group's jobs start again. True if it was paused."""
        return bool(self._control("unpause"))

    def _control(self, *args: str) -> int:
        keys = scripts.CONTROL.keys(kiq.ext.keyspace(self.config.redis), self.queue)
        return int(self.config.redis.eval(scripts.CONTROL.source, len(keys), *keys, self.name, *args))
