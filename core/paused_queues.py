"""Paused queues: which queues the workers leave alone for now (``kiq.Queue(name).pause()``), and the cheap
per-process view of them the fetchers consult.

The paused queue names are the members of the SET ``kiq:paused`` (kiq.keys.PAUSED). Pushes go on as usual; a
worker only stops taking jobs from those queues. The fetchers read the set at most once per ``REFRESH_INTERVAL``
per process (one ``SMEMBERS`` shared by every fetcher and thread of the process, never one per fetch), and no
blocking fetch waits longer than ``kiq.fetcher.MAX_BLOCK``: together a pause or an unpause takes effect in every
worker within ``REFRESH_INTERVAL + MAX_BLOCK`` (under a second) plus a round trip.

While Redis cannot be read, a process keeps the paused set it read last (its fetches fail meanwhile anyway), and
reads it again at the first fetch after: an unpause (or pause) made during an outage applies once Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from redis import RedisError

from .keys import PAUSED, keyspace

log = logging.getLogger("kiq")

REFRESH_INTERVAL = 0.4  # seconds a process goes on with the paused set it read last


class PausedQueues:
    """The paused set as this process last read it, read again when older than ``interval`` seconds by whichever
    thread asks first (the others go on with the previous answer meanwhile, rather than wait). Before the first
    answer there is none to go on with: a thread asking then waits for the read under way, and raises the error
    when the set cannot be read (never "nothing paused" for a set not read yet: the fetches of two threads, or of
    two capsules, ask at once when a worker starts)."""

    def __init__(self, redis: Any, interval: float = REFRESH_INTERVAL) -> None:
        self.redis = redis
        self.interval = interval
        self._keys: frozenset[str] = frozenset()
        self._next_read = 0.0
        self._read_once = False  # an answer was read: a failed read may go on with it
        self._reading = threading.Lock()

    def keys(self) -> frozenset[str]:
        """The list keys (``kiq.ext.Keyspace.queue``) of the paused queues."""
        if time.monotonic() >= self._next_read and self._reading.acquire(blocking=not self._read_once):
            try:
                if time.monotonic() >= self._next_read:  # not read meanwhile by the thread this one waited for
                    self._read()
            finally:
                self._reading.release()
        return self._keys

    def _read(self) -> None:
        try:
            names = self.redis.smembers(keyspace(self.redis).key(PAUSED))
        except RedisError as exc:
            # the last answer holds (a paused queue stays paused through an outage, never "nothing paused" for a
            # failed read), and the next ask reads again: the first fetch once Redis is back sees the set as it is
            # then. The fetch that follows reports the outage, once (kiq.server.outcomes.RedisOutage).
            if not self._read_once:
                raise
            log.debug("could not read the paused queues: %s", exc)
            return
        keys = keyspace(self.redis)
        listed = set()
        for name in names:
            try:
                listed.add(keys.queue(_text(name)))
            except ValueError:  # a name no queue of this layout can have (written by another program): no jobs
                continue
        self._keys = frozenset(listed)
        self._read_once = True
        self._next_read = time.monotonic() + self.interval


_views: dict[int, PausedQueues] = {}
_views_lock = threading.Lock()


def paused_queues(redis: Any) -> PausedQueues:
    """The process's one view of the paused set on this Redis client (shared by all its capsules' fetchers)."""
    with _views_lock:
        view = _views.get(id(redis))
        if view is None or view.redis is not redis:  # an id can be reused once a client is gone
            view = _views[id(redis)] = PausedQueues(redis)
        return view


def pause(redis: Any, name: str) -> bool:
    """Pause the queue ``name``; True if it was not paused yet. A name no queue can have on this Redis (in the
    ``queue`` layout of a cluster: empty, or starting with ``}``) is refused with the ValueError that says so."""
    keys = keyspace(redis)
    keys.queue(name)  # raises for a name no queue of this layout can have
    return bool(redis.sadd(keys.key(PAUSED), name))


def unpause(redis: Any, name: str) -> bool:
    """Unpause the queue ``name``; True if it was paused."""
    return bool(redis.srem(keyspace(redis).key(PAUSED), name))


def is_paused(redis: Any, name: str) -> bool:
    return bool(redis.sismember(keyspace(redis).key(PAUSED), name))


def paused_names(redis: Any) -> set[str]:
    """The names of the paused queues, read now."""
    return {_text(name) for name in redis.smembers(keyspace(redis).key(PAUSED))}


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name
