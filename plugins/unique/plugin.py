"""The unique-jobs plugin: its job options, its middleware, and releasing the lock of a job that ended without
succeeding for good (it died, or a plugin dropped it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import redis as redis_py

import kiq

from .lock import Locks
from .middleware import UniqueClientMiddleware, UniqueServerMiddleware

if TYPE_CHECKING:
    import redis

log = logging.getLogger("kiq.unique")

# the locks taken by the push_bulk running in this context: released if the bulk writes nothing after all
_bulk_locks: ContextVar[list[tuple[redis.Redis, str, str]] | None] = ContextVar("kiq_unique_bulk", default=None)


class UniquePlugin:
    """``plugins = ["unique"]`` in every process that pushes unique jobs or runs them (the worker's poller pushes
    scheduled jobs and retries again, and its server middleware releases the locks)."""

    def __init__(self) -> None:
        self._locks: Locks | None = None

    def locks(self, redis: redis.Redis) -> Locks:
        if self._locks is None:
            self._locks = Locks(redis)
        return self._locks

    def taken(self, redis: redis.Redis, key: str, jid: str) -> None:
        """A lock was taken for a push; inside ``push_bulk`` it is remembered until the bulk is written."""
        bulk = _bulk_locks.get()
        if bulk is not None:
            bulk.append((redis, key, jid))

    def release(self, redis: redis.Redis, key: str, jid: str) -> None:
        """Release the lock if ``jid`` holds it. A Redis error is logged, not raised: the job's outcome stands, and
        the lock's TTL ends it anyway."""
        try:
            self.locks(redis).release(redis, key, jid)
        except redis_py.RedisError as exc:
            log.warning("could not release the unique lock %s of %s (it expires by its TTL): %s", key, jid, exc)

    def release_job(self, job: dict[str, Any], config: kiq.Config) -> None:
        key = job.get("unique_key")
        if isinstance(key, str):
            self.release(config.redis, key, str(job.get("jid")))

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["unique_for", "unique_until", "unique_key"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(UniqueClientMiddleware, self)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(UniqueServerMiddleware, self)

    @kiq.hookimpl
    def kiq_push_bulk(self) -> AbstractContextManager[None]:
        return self._bulk()

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], config: kiq.Config) -> None:
        self.release_job(job, config)  # it will not run again: a new push may

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], config: kiq.Config) -> None:
        self.release_job(job, config)

    @contextmanager
    def _bulk(self) -> Iterator[None]:
        """``push_bulk`` takes every job's lock before it writes anything; if it then fails (a bad argument in a
        later job, Redis), the locks it took are released, as no job or only some were written."""
        taken: list[tuple[redis.Redis, str, str]] = []
        reset = _bulk_locks.set(taken)
        try:
            yield
        except BaseException:
            for redis, key, jid in taken:
                self.release(redis, key, jid)
            raise
        finally:
            _bulk_locks.reset(reset)
