"""The Redis failures a write can meet that are worth holding and retrying, named once by what they say about Redis.

- ``UNREACHABLE``: no server answers: a refused or broken connection, a timeout, no master known to the Sentinels,
  no cluster node reachable (``redis.RedisClusterException``).
- ``REFUSED``: the server answers but refuses writes for now: ``OOM`` at ``maxmemory``, ``READONLY`` (a replica: a
  failover left the client on one), ``LOADING`` (a restart reading its data; redis-py makes it a ``ConnectionError``).
- ``MOVED``: a Redis Cluster resharding or failing over: ``CLUSTERDOWN``, ``TRYAGAIN``, an ``ASK``/``MOVED``
  redirection the client could not follow, redis-py's ``ClusterError: TTL exhausted`` (redirections and TRYAGAINs
  that did not settle: the command never ran), and ``SlotMigrating`` (a script stopped at a key of a slot that is
  migrating, kiq.resharding).
- ``TRANSIENT``: all three: the same write works once Redis is back, unlike an error it would meet again (a wrong
  type, a script's error). A job's outcome, a plugin's write (``kiq.ext.hold_write``), a pushed job with
  ``reliable_push``: each is held and retried with backoff on these, never dropped.

A plain ``OSError`` is none of them: a plugin's own file or socket failing is that plugin's error.
"""

from __future__ import annotations

import redis
from redis import exceptions

Failures = tuple[type[Exception], ...]

UNREACHABLE: Failures = (redis.ConnectionError, redis.TimeoutError, exceptions.RedisClusterException)
REFUSED: Failures = (exceptions.OutOfMemoryError, exceptions.ReadOnlyError, exceptions.BusyLoadingError)
MOVED: Failures = (
    exceptions.ClusterDownError,
    exceptions.TryAgainError,  # SlotMigrating is one
    exceptions.AskError,  # MovedError is an AskError
    exceptions.ClusterError,
)
TRANSIENT: Failures = (*UNREACHABLE, *REFUSED, *MOVED)


class SlotMigrating(exceptions.TryAgainError):
    """A Lua script stopped at a key that its node no longer has, because the key's slot is migrating to another
    node (Redis: "Script attempted to access a non local key in a cluster node"; Valkey: "Attempted to ...").
    Lua does not roll back; kiq's scripts are written so that such a stop loses nothing (core/scripts.py's rules),
    and the whole script runs again (kiq.resharding does, then raises this if the move outlasts its patience)."""


NON_LOCAL_KEY = "access a non local key in a cluster node"  # in Redis's and Valkey's message for it


def migrating(exc: BaseException) -> bool:
    """Whether ``exc`` says a command or script met a slot being moved: run it again once the move settles."""
    if isinstance(exc, exceptions.ClusterError):
        return "TTL exhausted" in str(exc)
    if isinstance(exc, (exceptions.TryAgainError, exceptions.AskError)):
        return True
    return isinstance(exc, exceptions.ResponseError) and NON_LOCAL_KEY in str(exc)


def describe(exc: BaseException) -> str:
    """What a failure says about Redis, for a log line that begins "Redis at <url> ...": unreachable, out of memory,
    or the error itself."""
    if isinstance(exc, exceptions.OutOfMemoryError):
        return "is out of memory (maxmemory reached: it refuses commands that need memory)"
    if migrating(exc):
        return f"is moving a slot to another node (a resharding): {type(exc).__name__}: {exc}"
    if isinstance(exc, (*UNREACHABLE, OSError)):  # LOADING too: a ConnectionError, as redis-py raises it
        return "is unreachable"
    return f"failed with {type(exc).__name__}: {exc}"
