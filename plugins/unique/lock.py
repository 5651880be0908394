"""The lock of a unique job: one Redis key per (class, queue, arguments), whose value is the jid of the job holding it.
On a Redis Cluster every lock is in kiq's shared slot (``kiq.ext.keyspace``), beside the dropped counter its script
writes too; a job's payload keeps the lock's name (``unique_key``), turned into the key of the Redis it is used on.

Only the holder releases it (compare-and-delete in Lua), so a job whose lock expired and was taken by a newer push of
the same job cannot release the newer job's lock. Every lock has a TTL: a job whose worker died, or whose release was
lost, blocks duplicates for at most its ``unique_for`` seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext

if TYPE_CHECKING:
    import redis

LOCK_PREFIX = "kiq:unique:lock:"
DROPPED = "kiq:unique:dropped"  # HASH: job class -> pushes dropped because its lock was held
UNTIL = ("success", "start")

# KEYS: the lock, the dropped counter. ARGV: the jid, the TTL in ms, the job's class.
# 1: the lock is now the jid's; 0: another job holds it, and the push is counted as dropped (one round trip for both).
ACQUIRE = kiq.ext.lua_script(
    "unique.acquire",
    """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
return 0
""",
    lambda keys, lock: [keys.key(lock), keys.key(DROPPED)],
)

# KEYS: the lock. ARGV: the jid. Deletes the lock only while this jid holds it. 1: released.
RELEASE = kiq.ext.lua_script(
    "unique.release",
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
    lambda keys, lock: [keys.key(lock)],
)


def lock_key(job_class: str, queue: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    """The name of a job's lock (its key on a standalone Redis; on any, ``kiq.ext.keyspace(redis).key(name)``): a digest
    of its wire class name, queue and arguments, keyword arguments included (object keys sorted, so equal arguments
    give one key whatever their order; a job without keyword arguments keeps the key it always had). Raises
    TypeError/ValueError for arguments that are not JSON."""
    identity = json.dumps(
        [job_class, queue, args, kwargs] if kwargs else [job_class, queue, args], sort_keys=True, separators=(",", ":")
    )
    return LOCK_PREFIX + hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()


def lock_ttl(job: dict[str, Any], now: float) -> float | None:
    """How long the lock of a job being pushed lasts, in seconds; None when the job is not unique (no ``unique_for``,
    or ``unique_for=False`` for this push).

    ``unique_for`` seconds from when the job is due, so a job scheduled an hour ahead holds its lock for that hour
    too. Wrong values are refused at the push (``kiq.InvalidJobError``) rather than letting duplicates through.
    """
    unique_for = job.get("unique_for")
    if unique_for is None or unique_for is False:
        return None
    owner = job.get("class")
    if isinstance(unique_for, bool) or not isinstance(unique_for, int | float) or not 0 < unique_for < math.inf:
        raise kiq.InvalidJobError(
            f"{owner}: option 'unique_for' must be a number of seconds > 0, or False to push without the lock; "
            f"got {unique_for!r:.80}"
        )
    until = job.get("unique_until", "success")
    if until not in UNTIL:
        raise kiq.InvalidJobError(f"{owner}: option 'unique_until' must be 'success' or 'start', got {until!r:.80}")
    at = job.get("at")  # checked by the client already: a finite number when present
    due_in = at - now if isinstance(at, int | float) and at > now else 0.0
    return float(unique_for) + due_in


class Locks:
    """The lock operations. The scripts are registered once and run on the client given to each call (a push may
    go to another Redis than the config's: ``kiq.Client(config, redis=...)``)."""

    def __init__(self, redis: redis.Redis) -> None:
        self._acquire = redis.register_script(ACQUIRE.source)
        self._release = redis.register_script(RELEASE.source)

    def acquire(self, redis: redis.Redis, lock: str, jid: str, ttl: float, job_class: str) -> bool:
        """Take the lock named ``lock`` for ``jid``; False, with the push counted as dropped, when another job holds
        it."""
        ttl_ms = max(1, math.ceil(ttl * 1000))
        keys = ACQUIRE.keys(kiq.ext.keyspace(redis), lock)
        return bool(self._acquire(keys=keys, args=[jid, ttl_ms, job_class], client=redis))

    def release(self, redis: redis.Redis, lock: str, jid: str) -> bool:
        """Release the lock named ``lock`` if ``jid`` still holds it; True when it did."""
        return bool(self._release(keys=RELEASE.keys(kiq.ext.keyspace(redis), lock), args=[jid], client=redis))
