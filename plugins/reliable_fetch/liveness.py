"""A process's liveness key: present while the process lives, so recovery leaves its working lists alone."""

from __future__ import annotations

import threading
import time

import kiq
import kiq.ext

from . import scripts
from .keys import alive_key, liveness_ttl_ms


class Liveness:
    """A process's liveness key (``kiq:alive:<identity>``), shared by the fetchers of its capsules: refreshed by
    each, deleted when the last one closes. The plugin keeps one per process.

    Why a fetch refreshes it: recovery claims a working list only once its owner's key is gone, so the key must
    outlive every job that enters the list, or a live process's running jobs would be run again. The key is in
    kiq's shared slot and, in the queue layout, the working lists are not, so the fetch cannot refresh it in its
    own script; a fetch refreshes it in a command of its own, before it moves jobs, whenever a tenth of its TTL
    has passed since the last refresh was sent. A refresh sets the expiry to at least (its sending + TTL), and the
    move is sent only after its reply: a job enters a working list with 90 % of the TTL still ahead of the key, as
    when both were in one script, unless that thread stalls for most of a TTL between the two commands (then, as
    for any process whose heartbeat stalls that long, its jobs may run twice: never lost). Recovery, which moves
    jobs back to their queues, is what at-least-once rests on; the liveness key only keeps it off live processes.
    """

    def __init__(self, config: kiq.Config, identity: str) -> None:
        keys = kiq.ext.keyspace(config.redis)
        self.key = keys.key(alive_key(identity))
        self._keys = scripts.ALIVE.keys(keys, identity)
        self.ttl_ms = liveness_ttl_ms(config)
        self._script = config.redis.register_script(scripts.ALIVE.source)
        self._users = 0
        self._lock = threading.Lock()
        self._refreshed = -float("inf")  # time.monotonic() of the last refresh sent

    def join(self) -> None:
        with self._lock:
            self._users += 1
        self.refresh()  # before the first job enters a working list

    def refresh(self) -> None:
        self._refreshed = time.monotonic()  # before sending: the key expires no sooner than this plus its TTL
        self._script(keys=self._keys, args=[self.ttl_ms])

    def refresh_if_due(self) -> None:
        """Before a fetch: refresh the key once a tenth of its TTL has passed since the last refresh (not a
        round trip per fetch; the heartbeat refreshes it too)."""
        if time.monotonic() - self._refreshed >= self.ttl_ms / 10_000:
            self.refresh()

    def leave(self) -> bool:
        """True when the caller was the last user (and should delete the key)."""
        with self._lock:
            self._users -= 1
            return self._users == 0
