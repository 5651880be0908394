"""Unique jobs: a push of a job while the same job (class, queue, arguments) holds its lock is dropped.

    class SyncAccount(kiq.Job):
        kiq_options = {"unique_for": 600}                    # seconds; "unique_until": "success" (default) | "start"

    SyncAccount.perform_async(7)                             # -> jid
    SyncAccount.perform_async(7)                             # -> None: dropped and counted, the first holds the lock
    SyncAccount.set(unique_for=False).perform_async(7)       # -> jid: this push ignores the lock

Enable it with ``plugins = ["unique"]`` in every process that pushes or runs unique jobs. Best effort, like Sidekiq
Enterprise's: see the README, "Unique jobs", for what it guarantees and what it cannot.
"""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from .lock import DROPPED, lock_key
from .plugin import UniquePlugin

__all__ = ["UniquePlugin", "dropped_counts", "lock_holder", "lock_key"]


def lock_holder(
    job: type[kiq.Job] | str,
    args: list[Any],
    queue: str | None = None,
    config: kiq.Config | None = None,
    kwargs: dict[str, Any] | None = None,
) -> str | None:
    """The jid of the job holding the unique lock of ``job`` with these arguments and keyword arguments (in their
    JSON form, as pushed; on ``queue``, by default the class's), or None when nothing holds it."""
    if isinstance(job, str):
        name, default_queue = job, "default"
    else:
        name, default_queue = job.kiq_name, job.get_options().get("queue", "default")
    redis = (config or kiq.default_config()).redis
    holder = redis.get(kiq.ext.keyspace(redis).key(lock_key(name, queue or default_queue, args, kwargs)))
    return None if holder is None else str(holder)


def dropped_counts(config: kiq.Config | None = None) -> dict[str, int]:
    """How many pushes were dropped because their lock was held, by job class (every process on the Redis)."""
    redis = (config or kiq.default_config()).redis
    counts = redis.hgetall(kiq.ext.keyspace(redis).key(DROPPED))
    return {str(name): int(count) for name, count in counts.items()}
