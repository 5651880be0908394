"""The group slots a worker process holds: leased by its fetches (scripts.POP), released when their jobs end,
renewed on every heartbeat, so that a process that dies leaves its slots to expire within one lease.

A release is not sent from the job's thread: it is queued here and a thread of the plugin sends every release
queued meanwhile in one script per queue. While Redis is unreachable the releases wait, and are sent once it is
back (the fetchers log the outage, once); nothing is dropped but by the process dying, and then the lease expires.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

import kiq
import kiq.ext

from . import scripts
from .keys import slot

log = logging.getLogger("kiq.groups")

RETRY = (0.05, 1.0)  # seconds between attempts to send releases while Redis refuses them: first, cap


def lease_ms(config: kiq.Config) -> int:
    """How long a slot outlives its holder's last renewal: three heartbeats (at least a second), as a reliable
    fetcher's liveness key, so that a dead process's slots come back about when its jobs are recovered."""
    return int(max(3 * config.heartbeat_interval, 1.0) * 1000)


class Leases:
    """One per worker process (per config): the slots its fetches took, by queue."""

    def __init__(self, config: kiq.Config) -> None:
        self.redis = config.redis
        self.keys = kiq.ext.keyspace(self.redis)
        self.lease_ms = lease_ms(config)
        self._renew = self.redis.register_script(scripts.RENEW.source)
        self._release = self.redis.register_script(scripts.RELEASE.source)
        self._held: dict[str, Counter[str]] = {}  # queue -> slots held (a jid twice in flight counts twice)
        self._pending: dict[str, list[str]] = {}  # queue -> slots to release
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def hold(self, queue: str, member: str) -> None:
        with self._lock:
            self._held.setdefault(queue, Counter())[member] += 1

    def release(self, queue: str, group: str, jid: str) -> None:
        """The job ``jid`` of ``group`` ended (or went back to its queue): its slot goes back, soon."""
        member = slot(group, jid)
        with self._lock:
            held = self._held.get(queue)
            if held is None or held[member] <= 0:
                return  # no slot of this process's (a group without a limit takes none)
            held[member] -= 1
            if not held[member]:
                del held[member]
            self._pending.setdefault(queue, []).append(member)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._send_loop, name="kiq-groups-release", daemon=True)
                self._thread.start()
            self._lock.notify()

    def held(self) -> dict[str, list[str]]:
        with self._lock:
            return {queue: list(members.elements()) for queue, members in self._held.items() if members}

    def renew(self) -> None:
        """Extend every slot this process holds (on each heartbeat); while Redis is unreachable, wait for the next."""
        try:
            for queue, members in self.held().items():
                self._renew(keys=scripts.RENEW.keys(self.keys, queue), args=[self.lease_ms, *dict.fromkeys(members)])
        except kiq.ext.TRANSIENT as exc:
            log.debug("group slots not renewed now: %s", exc)

    def release_all(self, timeout: float) -> None:
        """At shutdown: every slot still held (jobs fetched and not started) goes back, and what is queued is sent."""
        with self._lock:
            for queue, members in self._held.items():
                self._pending.setdefault(queue, []).extend(members.elements())
            self._held.clear()
            self._stopping = True
            self._lock.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            self._thread = None  # a worker started again on this config starts another
            self._stopping = False
            left = self._take() if thread is None or not thread.is_alive() else {}
        try:
            self._send(left)
        except kiq.ext.TRANSIENT as exc:
            log.info("group slots not released at shutdown (%s): they expire within %d ms", exc, self.lease_ms)

    def _take(self) -> dict[str, list[str]]:
        pending, self._pending = self._pending, {}
        return pending

    def _send_loop(self) -> None:
        backoff = kiq.ext.Backoff(*RETRY)
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._pending) or self._stopping)
                pending = self._take()
                if not pending and self._stopping:
                    return
            try:
                self._send(pending)
                backoff.reset()
            except Exception as exc:
                with self._lock:  # back in front of what came meanwhile, kept for the next attempt
                    for queue, members in pending.items():
                        self._pending[queue] = members + self._pending.get(queue, [])
                    stopping = self._stopping
                if not isinstance(exc, kiq.ext.TRANSIENT):
                    log.error("could not release group slots (%s); retrying", exc)
                if stopping and isinstance(exc, kiq.ext.UNREACHABLE):
                    return  # a stop does not wait for Redis: the leases expire
                threading.Event().wait(backoff.next())

    def _send(self, pending: dict[str, list[str]]) -> None:
        for queue, members in pending.items():
            self._release(keys=scripts.RELEASE.keys(self.keys, queue), args=members)
