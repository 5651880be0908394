"""The Poller (Sidekiq's ``Scheduled::Poller`` and ``Enq``): moves due jobs from ``retry`` and ``schedule`` to
their queues.

Each due job is popped with a Lua script (the read and the ZREM are one atomic step, so two workers polling at
once never both enqueue it: the ZREM wins) and pushed through the client, so client middleware runs again and the
job gets its ``enqueued_at`` then.

Timing: a poller knows the earliest due score of each set — every pass ends with it (the script that finds
nothing due returns the next score), and every push of a scheduled job and every recorded retry publishes its
score on ``kiq:poller-wake`` (poller_wake.py) — and sleeps until then, so a job is enqueued within a few
milliseconds of its due time, never before it (by the worker's clock). Besides, as in Sidekiq, every worker polls
both sets at random intervals whose average is ``poll_interval`` times the number of live processes (the cluster
as a whole about every ``poll_interval`` seconds): these regular polls find what no message announced (a job
added by Sidekiq or another client, a message lost while the subscription was down) and prune dead entries from
``processes`` (at most once a minute across the cluster). With nothing due, Redis sees no more commands than that.
The first pass comes as soon as the worker has registered (Sidekiq waits two to three intervals).
"""

from __future__ import annotations

import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import redis as redis_py

from ..backoff import Backoff
from ..client import Client
from ..errors import InvalidJobError
from ..failures import TRANSIENT
from ..keys import PROCESS_CLEANUP, PROCESSES, RETRY, SCHEDULE, keyspace
from ..payload import parse_payload
from ..scripts import lua_script
from . import dead
from .poller_wake import SUBSCRIBE_WAIT, WakeListener

if TYPE_CHECKING:
    from ..config import Config
    from .outcomes import RedisOutage

log = logging.getLogger("kiq")

SETS = (RETRY, SCHEDULE)
# Seconds a poller leaves at least between two passes that its wake-ups (not its regular polls) start: jobs due
# close together are then moved by one pass, and N workers woken for each of a stream of due jobs do not query the
# sets more than N / MIN_PASS_GAP times a second; a job is late by at most this much more.
MIN_PASS_GAP = 0.05
RETRY_BACKOFF = (0.5, 5.0)  # seconds before a pass that failed is tried again: the first pause and the cap

# ARGV[1]: now. The first member of the set if it is due by now, removed; else {its score} (a string, as Redis
# formats it), or nil when the set is empty.
ZPOPBYSCORE = lua_script(
    "scheduled.pop",
    """
local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
if not first[1] then
  return false
end
if tonumber(first[2]) <= tonumber(ARGV[1]) then
  redis.call("ZREM", KEYS[1], first[1])
  return first[1]
end
return {first[2]}
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
        # per set, the earliest due score known (inf: none), lowered by the wake-up messages; guarded by _lock
        self._heads = dict.fromkeys(SETS, math.inf)
        self._lock = threading.Lock()
        self._woken = threading.Event()
        self._listener = WakeListener(config, self.wake)

    def start(self) -> None:
        """Start polling in a daemon thread."""
        if self._thread is None:
            self._listener.start()
            self._thread = threading.Thread(target=self._run, name="kiq-poller", daemon=True)
            self._thread.start()

    def terminate(self, timeout: float = 5.0) -> None:
        """Stop polling: a pass in progress ends after the job it is moving; returns when the thread is gone."""
        self._done.set()
        self._woken.set()
        self._listener.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self, set_name: str, at: float) -> None:
        """A job in ``set_name`` is due at ``at`` (epoch seconds): pass over that set then, if earlier than known."""
        with self._lock:
            if at < self._heads[set_name]:
                self._heads[set_name] = at
                self._woken.set()

    def enqueue_jobs(self, now: float | None = None) -> int:
        """One pass: enqueue every job due by ``now`` (default: the current time), ``retry`` first, inside
        the ``kiq_operation`` hook's context managers (name ``"poll"``).

        Returns how many jobs were enqueued. Raises on a Redis error (the job being moved is put back).
        """
        return self._pass(SETS, now)

    # -- internals ----------------------------------------------------------------------------------
    def _pass(self, sets: Sequence[str], now: float | None = None) -> int:
        with self.config.plugins.enter(self.config.plugins.notify("kiq_operation", name="poll", config=self.config)):
            return sum(self._enqueue_due(name, now) for name in sets)

    def _enqueue_due(self, name: str, now: float | None) -> int:
        """Enqueue the jobs of set ``name`` due by ``now``; then its head is the next score (or what a message told
        meanwhile, if earlier). After a failure, a wake-up looks at the set again a ``poll_interval`` later."""
        with self._lock:
            known, self._heads[name] = self._heads[name], math.inf  # from here on the messages tell what is new
        count = 0
        head = math.inf
        try:
            while not self._done.is_set():
                due = time.time() if now is None else now
                reply = self._zpopbyscore(keys=ZPOPBYSCORE.keys(self._keys, name), args=[repr(due)])
                if reply is None:
                    break
                if isinstance(reply, list):
                    head = float(reply[0])
                    break
                count += self._enqueue(name, reply, due)
            else:
                head = known  # stopped: as it was
        except BaseException:  # Redis is unreachable, most likely: not again at once
            head = max(known, time.time() + self.config.poll_interval)
            raise
        finally:
            with self._lock:
                self._heads[name] = min(self._heads[name], head)
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
        # the first pass once subscribed, so no push between the two goes unheard (bounded: a Redis that refuses
        # pub/sub leaves the regular polls)
        self._listener.subscribed.wait(SUBSCRIBE_WAIT)
        regular_at = time.time()  # the first pass: learn each set's head
        retry = Backoff(*RETRY_BACKOFF)
        last_pass = -math.inf
        while not self._done.is_set():
            self._woken.clear()  # before reading the heads: a message from here on cuts the wait short
            now = time.time()
            with self._lock:
                due = [name for name in SETS if self._heads[name] <= now]
                earliest = min(self._heads.values())
            if now >= regular_at:
                tick(name="poller", due_within=0.0, config=self.config)  # due now: the pass itself must end in time
                passed = self._step(self.enqueue_jobs, "enqueue_jobs") and self._step(self._cleanup, "_cleanup")
                # after a failure (Redis away) the next pass comes as a fetch's retry would, not a poll interval
                # later: due jobs go out soon after Redis is back, and the outage's end is told then
                regular_at = time.time() + (self._next_wait() if passed else retry.next())
                if passed:
                    retry.reset()
                last_pass = time.time()
                continue
            if due and now - last_pass >= MIN_PASS_GAP:
                tick(name="poller", due_within=0.0, config=self.config)
                self._step(functools.partial(self._pass, due), "enqueue_jobs")
                last_pass = time.time()
                continue
            wait = max(min(regular_at, max(earliest, last_pass + MIN_PASS_GAP)) - now, 0.0)
            tick(name="poller", due_within=wait, config=self.config)
            self._woken.wait(wait)
        tick(name="poller", due_within=None, config=self.config)

    def _step(self, step: Callable[[], int], name: str) -> bool:
        """Run one step of a pass; whether it worked."""
        try:
            step()
        except Exception as exc:  # most likely Redis is unreachable: try again next time
            self._failed(exc, f"poller: {name}")
            return False
        if self.outage is not None and self.outage.down_since is not None:
            self.outage.recovered("poller")
        return True

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

    def process_count(self) -> int:
        return max(1, int(self.config.redis.scard(self._keys.key(PROCESSES))))

    def random_poll_interval(self) -> float:
        """Seconds until the next regular poll, at random around ``poll_interval`` times the number of processes N:
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
