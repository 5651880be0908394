"""The Poller (Sidekiq's ``Scheduled::Poller`` and ``Enq``): moves due jobs from ``retry`` and ``schedule`` to
their queues.

Each due job is popped with a Lua script (the ZRANGEBYSCORE and the ZREM are one atomic step, so two workers
polling at once never both enqueue it) and pushed through the client, so client middleware runs again
and the job gets its ``enqueued_at`` then.

Timing follows Sidekiq: every worker polls, at random intervals whose average is ``poll_interval`` times the
number of live processes, so the cluster as a whole polls about every ``poll_interval`` seconds without
coordination. The first poll comes after two to three intervals (Sidekiq's 10-15 s with the 5 s default),
giving the heartbeats time to register, and dead entries are pruned from ``processes`` (at most once a
minute across the cluster).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from typing import TYPE_CHECKING

import redis as redis_py

from ..client import Client
from ..errors import InvalidJobError
from ..failures import TRANSIENT
from ..keys import PROCESS_CLEANUP, PROCESSES, RETRY, SCHEDULE, keyspace
from ..payload import parse_payload
from ..scripts import lua_script
from . import dead

if TYPE_CHECKING:
    from ..config import Config
    from .outcomes import RedisOutage

log = logging.getLogger("kiq")

SETS = (RETRY, SCHEDULE)

# returns the first member due at ARGV[1] and removes it, or nil
ZPOPBYSCORE = lua_script(
    "scheduled.pop",
    """
local jobs = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, 1)
if jobs[1] then
  redis.call("ZREM", KEYS[1], jobs[1])
  return jobs[1]
end
return false
""",
    lambda keys, name: [keys.key(name)],
)

# KEYS: the set. ARGV: score, member. A job whose push failed goes back where it was. ZADD alone is refused when
# Redis is at maxmemory (noeviction), which would lose the job; inside a script that has already written (the
# ZREM, a no-op), Redis lets it through: it only restores the memory the pop freed.
PUT_BACK = lua_script(
    "scheduled.put_back",
    """
redis.call("ZREM", KEYS[1], ARGV[2])
return redis.call("ZADD", KEYS[1], ARGV[1], ARGV[2])
""",
    lambda keys, name: [keys.key(name)],
)


class Poller:
    """The thread that enqueues due scheduled jobs and retries; the launcher starts and stops it."""

    def __init__(self, config: Config, outage: RedisOutage | None = None) -> None:
        self.config = config
        self.outage = outage  # the worker's: an unreachable Redis is logged once for the whole worker
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = Client(config)
        self._keys = keyspace(config.redis)
        self._zpopbyscore = config.redis.register_script(ZPOPBYSCORE.source)
        self._put_back_script = config.redis.register_script(PUT_BACK.source)

    def start(self) -> None:
        """Start polling in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kiq-poller", daemon=True)
            self._thread.start()

    def terminate(self, timeout: float = 5.0) -> None:
        """Stop polling: a pass in progress ends after the job it is moving; returns when the thread is gone."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def enqueue_jobs(self, now: float | None = None) -> int:
        """One pass: enqueue every job due by ``now`` (default: the current time), ``retry`` first, inside
        the ``kiq_operation`` hook's context managers (name ``"poll"``).

        Returns how many jobs were enqueued. Raises on a Redis error (the job being moved is put back).
        """
        with self.config.plugins.enter(self.config.plugins.notify("kiq_operation", name="poll", config=self.config)):
            return self._enqueue_due(now)

    # -- internals ----------------------------------------------------------------------------------
    def _enqueue_due(self, now: float | None) -> int:
        count = 0
        for name in SETS:
            while not self._done.is_set():
                due = time.time() if now is None else now
                raw = self._zpopbyscore(keys=ZPOPBYSCORE.keys(self._keys, name), args=[repr(due)])
                if raw is None:
                    break
                count += self._enqueue(name, raw, due)
        return count

    def _enqueue(self, set_name: str, raw: str, due: float) -> int:
        config = self.config
        try:
            job = parse_payload(raw)
            job.pop("at", None)  # a leftover "at" would send it straight back to the schedule
            self._client.push(job)
        except redis_py.RedisError:
            self._put_back(set_name, raw, due)
            raise
        except InvalidJobError as exc:
            # no later pass could enqueue it either: once to the dead set, logged once
            log.warning("poller: a job in %r can never be enqueued (%s); moved to the dead set: %.200s",
                        set_name, exc, raw)  # fmt: skip
            dead.bury(config, raw)
            return 0
        except Exception as exc:
            # e.g. a client middleware failed: keep the job and try again next poll, not in a hot loop
            self._put_back(set_name, raw, max(due, time.time()) + config.poll_interval)
            config.handle_exception(exc, {"context": "poller: pushing a due job failed; it stays", "job": raw})
            return 0
        log.debug("enqueued from %s: %s", set_name, raw)
        return 1

    def _put_back(self, set_name: str, raw: str, score: float) -> None:
        try:
            self._put_back_script(keys=PUT_BACK.keys(self._keys, set_name), args=[repr(score), raw])
        except redis_py.RedisError:
            log.error("poller: could not put a job back into %r; it is lost: %s", set_name, raw)
            raise

    def _run(self) -> None:
        tick = functools.partial(
            self.config.plugins.notify, "kiq_loop_tick"
        )  # for liveness probes: when this loop comes round again
        wait = self.initial_wait()
        tick(name="poller", due_within=wait, config=self.config)
        self._done.wait(wait)
        while not self._done.is_set():
            tick(name="poller", due_within=0.0, config=self.config)  # due now: the pass itself must end in time
            for step in (self.enqueue_jobs, self._cleanup):
                try:
                    step()
                except Exception as exc:  # most likely Redis is unreachable: try again next time
                    self._failed(exc, f"poller: {step.__name__}")
                else:
                    if self.outage is not None and self.outage.down_since is not None:
                        self.outage.recovered("poller")
            wait = self._next_wait()
            tick(name="poller", due_within=wait, config=self.config)
            self._done.wait(wait)
        tick(name="poller", due_within=None, config=self.config)

    def _failed(self, exc: Exception, context: str) -> None:
        if self.outage is not None and isinstance(exc, TRANSIENT):
            self.outage.failed(exc, "poller")
        else:
            self.config.handle_exception(exc, {"context": context})

    def _cleanup(self) -> int:
        return cleanup_processes(self.config.redis)

    def _next_wait(self) -> float:
        try:
            return self.random_poll_interval()
        except redis_py.RedisError as exc:
            self._failed(exc, "poller: counting processes")
            return self.config.poll_interval

    def initial_wait(self) -> float:
        """Seconds before the first poll: two intervals plus up to one more at random."""
        return self.config.poll_interval * (2 + random.random())

    def process_count(self) -> int:
        return max(1, int(self.config.redis.scard(self._keys.key(PROCESSES))))

    def random_poll_interval(self) -> float:
        """Seconds until the next poll, at random around ``poll_interval`` times the number of processes N:
        within ±50% of it while N < 10; from 0 to it for larger clusters (Sidekiq's rule)."""
        count = self.process_count()
        interval = count * self.config.poll_interval
        if count < 10:
            return interval * random.random() + interval / 2
        return interval * random.random()


def cleanup_processes(connection: redis_py.Redis) -> int:
    """Drop identities from ``processes`` whose heartbeat hash expired (the process died without saying so).

    At most once a minute across all callers (the ``process_cleanup`` NX lock); returns how many were removed.
    """
    keys = keyspace(connection)
    if not connection.set(keys.key(PROCESS_CLEANUP), "1", nx=True, ex=60):
        return 0
    identities = sorted(connection.sscan_iter(keys.key(PROCESSES)))
    if not identities:
        return 0
    pipe = connection.pipeline(transaction=False)
    for identity in identities:
        pipe.hget(keys.key(identity), "info")
    infos = pipe.execute()
    gone = [identity for identity, info in zip(identities, infos, strict=True) if info is None]
    return int(connection.srem(keys.key(PROCESSES), *gone)) if gone else 0
