"""Rate limiters shared by every process on a Redis: ``concurrent`` (N at once), ``window`` (N in any interval) and
``bucket`` (a token bucket: bursts of N, N per interval on average).

A limiter is a definition, cheap to make and safe to share between threads: make one per use or keep one at module
level. ``with limiter:`` waits up to ``wait_timeout`` seconds for room, then raises ``OverLimit``; in a job, the
limiter plugin's middleware turns that into a reschedule of the job with a backoff (see kiq.plugins.limiter.plugin).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import redis as redis_py

import kiq
import kiq.ext

from . import scripts
from .scripts import KEY_PREFIX
from .waits import waits

if TYPE_CHECKING:
    import redis

log = logging.getLogger("kiq.limiter")

DEFAULT_WAIT = 5.0  # seconds a `with` waits for room before OverLimit (Sidekiq Enterprise's default)


class OverLimit(Exception):
    """A limiter had no room within its ``wait_timeout``. Raised out of ``with limiter:``; in a worker with the limiter
    plugin, the job is rescheduled with a backoff instead of failing (its retries are not used)."""

    def __init__(self, limiter: Limiter) -> None:
        super().__init__(f"{limiter.describe()} is full (waited {limiter.wait_timeout:g} s)")
        self.limiter = limiter


@dataclass(frozen=True)
class Lease:
    """Room granted by a limiter: what ``with limiter as lease:`` gives. ``granted_at`` is Redis's clock (epoch
    seconds) when it was granted."""

    limiter: Limiter
    granted_at: float
    token: str
    redis: redis.Redis

    def release(self) -> None:
        self.limiter.release(self)


# the leases the `with` blocks of this thread (or task) hold, innermost last: a limiter shared by several threads
# finds its own lease on the way out
_held: ContextVar[tuple[Lease, ...]] = ContextVar("kiq_limiter_leases", default=())


class Limiter:
    """What the three kinds share: a name, a limit, the wait for room, and the ``with`` protocol."""

    kind: ClassVar[str]
    script: ClassVar[kiq.ext.LuaScript]

    def __init__(self, name: str, limit: int, wait_timeout: float, config: kiq.Config | None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a limiter's name must be a non-empty string, got {name!r:.80}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"{self.kind} limiter {name!r}: the limit must be an integer >= 1, got {limit!r:.80}")
        self.name = name
        self.limit = limit
        self.wait_timeout = seconds(wait_timeout, f"{self.kind} limiter {name!r}: wait_timeout", allow_zero=True)
        self.config = config
        self.key = f"{KEY_PREFIX}{self.kind}:{name}"  # the name of its state's key (kiq.ext.keyspace(redis).key)
        self.field = f"{self.kind}:{name}"

    def definition(self) -> dict[str, Any]:
        """What is shared by every process using this limiter (recorded in the registry for the listing)."""
        return {"kind": self.kind, "name": self.name, "limit": self.limit}

    def describe(self) -> str:
        return f"{self.kind} limiter {self.name!r} ({self.limit_text()})"

    def limit_text(self) -> str:
        raise NotImplementedError

    def script_args(self, token: str) -> list[Any]:
        raise NotImplementedError

    def in_use(self, redis: redis.Redis, now_ms: float) -> int:
        """How much of the limit is taken now (``now_ms``: Redis's clock), for the listing."""
        raise NotImplementedError

    def release(self, lease: Lease) -> None:
        """Give the room back; only what is held (a concurrent slot) has anything to give back."""

    def acquire(self) -> Lease:
        """Room for one, waiting up to ``wait_timeout`` seconds; ``OverLimit`` when there is none by then."""
        redis = (self.config or kiq.default_config()).redis
        script = redis.register_script(self.script.source)
        keys = self.script.keys(kiq.ext.keyspace(redis), self.key)
        deadline = time.monotonic() + self.wait_timeout
        token = kiq.ext.new_jid()
        granted = self._granted(script(keys=keys, args=self.script_args(token)), token, deadline)
        if isinstance(granted, Lease):  # room at once: no wait to count
            return granted
        with waits.waiting(self.field):
            while True:
                time.sleep(granted)
                token = kiq.ext.new_jid()
                reply = script(keys=keys, args=self.script_args(token))
                granted = self._granted(reply, token, deadline)
                if isinstance(granted, Lease):
                    return granted

    async def acquire_async(self) -> Lease:
        """``acquire`` for an ``async def`` job (``async with limiter:``): it waits without blocking the event loop."""
        redis = kiq.AsyncClient(self.config or kiq.default_config()).redis
        script = redis.register_script(self.script.source)
        keys = self.script.keys(kiq.ext.keyspace(redis), self.key)
        deadline = time.monotonic() + self.wait_timeout
        token = kiq.ext.new_jid()
        granted = self._granted(await script(keys=keys, args=self.script_args(token)), token, deadline)
        if isinstance(granted, Lease):
            return granted
        with waits.waiting(self.field):
            while True:
                await asyncio.sleep(granted)
                token = kiq.ext.new_jid()
                reply = await script(keys=keys, args=self.script_args(token))
                granted = self._granted(reply, token, deadline)
                if isinstance(granted, Lease):
                    return granted

    def _granted(self, reply: Any, token: str, deadline: float) -> Lease | float:
        """The script's answer: the lease, or how long to wait before asking again (``OverLimit`` past the deadline).
        A lease is given back on the sync client: one fast command, also from an event loop."""
        granted, secs, micros, wait_ms = reply
        if granted:
            redis = (self.config or kiq.default_config()).redis
            return Lease(self, int(secs) + int(micros) / 1_000_000, token, redis)
        left = deadline - time.monotonic()
        if left <= 0:
            raise OverLimit(self)
        return float(min(left, int(wait_ms) / 1000))

    def __enter__(self) -> Lease:
        return self._hold(self.acquire())

    async def __aenter__(self) -> Lease:
        return self._hold(await self.acquire_async())

    def _hold(self, lease: Lease) -> Lease:
        _held.set((*_held.get(), lease))
        return lease

    def __exit__(self, *exc_info: object) -> None:
        held = _held.get()
        index = max(i for i, lease in enumerate(held) if lease.limiter is self)
        _held.set(held[:index] + held[index + 1 :])
        held[index].release()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)

    def __repr__(self) -> str:
        return f"<{self.describe()}>"

    def _definition_json(self) -> str:
        return json.dumps(self.definition(), sort_keys=True)


class ConcurrentLimiter(Limiter):
    """At most ``limit`` holders at once. A holder's slot is freed by leaving the ``with`` block, or after
    ``lock_timeout`` seconds (a worker killed while holding it gives it back then; so does work that runs longer)."""

    kind = "concurrent"
    script = scripts.CONCURRENT

    def __init__(self, name: str, limit: int, lock_timeout: float, wait_timeout: float,
                 config: kiq.Config | None) -> None:  # fmt: skip
        super().__init__(name, limit, wait_timeout, config)
        self.lock_timeout = seconds(lock_timeout, f"concurrent limiter {name!r}: lock_timeout")
        self._definition = self._definition_json()

    def definition(self) -> dict[str, Any]:
        return {**super().definition(), "lock_timeout": self.lock_timeout}

    def limit_text(self) -> str:
        return f"{self.limit} at once"

    def script_args(self, token: str) -> list[Any]:
        return [self.limit, math.ceil(self.lock_timeout * 1000), token, self.field, self._definition]

    def in_use(self, redis: redis.Redis, now_ms: float) -> int:
        return int(redis.zcount(kiq.ext.keyspace(redis).key(self.key), f"({now_ms}", "+inf"))

    def release(self, lease: Lease) -> None:
        try:
            lease.redis.zrem(kiq.ext.keyspace(lease.redis).key(self.key), lease.token)
        except redis_py.RedisError as exc:  # the work inside succeeded: the slot comes back at its lock timeout
            log.warning("%s: could not free a slot (it frees after %g s): %s", self.describe(), self.lock_timeout, exc)


class RateLimiter(Limiter):
    """A limit per ``interval`` seconds: what the window and the bucket share."""

    def __init__(self, name: str, limit: int, interval: float, wait_timeout: float,
                 config: kiq.Config | None) -> None:  # fmt: skip
        super().__init__(name, limit, wait_timeout, config)
        self.interval = seconds(interval, f"{self.kind} limiter {name!r}: interval")
        self._definition = self._definition_json()

    def definition(self) -> dict[str, Any]:
        return {**super().definition(), "interval": self.interval}

    def limit_text(self) -> str:
        return f"{self.limit} per {self.interval:g} s"


class WindowLimiter(RateLimiter):
    """At most ``limit`` admissions in any ``interval`` seconds (a sliding window, exact: no burst of 2N across
    the edge of two fixed windows)."""

    kind = "window"
    script = scripts.WINDOW

    def script_args(self, token: str) -> list[Any]:
        return [self.limit, math.ceil(self.interval * 1000), token, self.field, self._definition]

    def in_use(self, redis: redis.Redis, now_ms: float) -> int:
        return int(redis.zcount(kiq.ext.keyspace(redis).key(self.key), f"({now_ms - self.interval * 1000}", "+inf"))


class BucketLimiter(RateLimiter):
    """A token bucket: up to ``limit`` at once after a quiet spell, and ``limit`` per ``interval`` on average (it
    refills continuously), so bursts are allowed and the rate is smooth."""

    kind = "bucket"
    script = scripts.BUCKET

    def script_args(self, token: str) -> list[Any]:
        return [self.limit, math.ceil(self.interval * 1000), self.field, self._definition]

    def in_use(self, redis: redis.Redis, now_ms: float) -> int:
        tokens, at = redis.hmget(kiq.ext.keyspace(redis).key(self.key), ["tokens", "at"])
        if tokens is None or at is None:
            return 0
        refilled = float(tokens) + max(0.0, now_ms - float(at)) * self.limit / (self.interval * 1000)
        return self.limit - math.floor(min(self.limit, refilled))


def seconds(value: Any, what: str, allow_zero: bool = False) -> float:
    """A limiter's duration argument, checked: a finite number of seconds > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number of seconds, got {value!r:.80}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds, got {value!r}")
    return float(value)


def concurrent(name: str, limit: int, *, lock_timeout: float = 30.0, wait_timeout: float = DEFAULT_WAIT,
               config: kiq.Config | None = None) -> ConcurrentLimiter:  # fmt: skip
    """``with concurrent("erp", 2, lock_timeout=60):`` at most 2 at once, across every process on the Redis. Set
    ``lock_timeout`` above the longest the block can take: past it, the slot is given to someone else."""
    return ConcurrentLimiter(name, limit, lock_timeout, wait_timeout, config)


def window(name: str, limit: int, interval: float = 1.0, *, wait_timeout: float = DEFAULT_WAIT,
           config: kiq.Config | None = None) -> WindowLimiter:  # fmt: skip
    """``with window("stripe", 100, 1.0):`` at most 100 in any second, across every process on the Redis."""
    return WindowLimiter(name, limit, interval, wait_timeout, config)


def bucket(name: str, limit: int, interval: float = 1.0, *, wait_timeout: float = DEFAULT_WAIT,
           config: kiq.Config | None = None) -> BucketLimiter:  # fmt: skip
    """``with bucket("mailer", 50, 60.0):`` 50 per minute on average, in bursts of up to 50."""
    return BucketLimiter(name, limit, interval, wait_timeout, config)
