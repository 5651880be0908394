"""The fetcher seam and BasicFetch: how processors get jobs out of Redis.

BasicFetch is Sidekiq's: ``BRPOP`` over the capsule's queues with a 2 s timeout (so a quiet or stop is noticed
within 2 s). A job is out of Redis once fetched, so a crash loses the jobs in flight; a graceful stop pushes
them back with ``RPUSH`` (the end ``BRPOP`` takes from, so they run next). The ``reliable`` plugin keeps
fetched jobs in Redis until they are acknowledged.
"""

from __future__ import annotations

import importlib
import logging
import random
from typing import TYPE_CHECKING, Protocol, cast

from .errors import ConfigError

if TYPE_CHECKING:
    from .manager import Capsule

log = logging.getLogger("kiq")

TIMEOUT = 2  # seconds a BRPOP blocks; bounds how long a processor takes to notice a quiet or stop


class UnitOfWork(Protocol):
    """One fetched job: its queue name (without ``queue:``) and the raw JSON as fetched."""

    queue_name: str
    job: str

    def acknowledge(self) -> None: ...

    def requeue(self) -> None: ...


class Fetcher(Protocol):
    def retrieve_work(self) -> UnitOfWork | None:
        """The next job, or None after blocking at most ~2 s."""
        ...

    def bulk_requeue(self, units: list[UnitOfWork]) -> None:
        """Give jobs that will not finish here back to their queues (at a stop; ``[]`` at every stop)."""
        ...


class BasicUnitOfWork:
    __slots__ = ("fetch", "job", "queue_name")

    def __init__(self, queue_name: str, job: str, fetch: BasicFetch) -> None:
        self.queue_name = queue_name
        self.job = job
        self.fetch = fetch

    def acknowledge(self) -> None:
        """Nothing to do: BRPOP already removed the job from Redis."""

    def requeue(self) -> None:
        self.fetch.capsule.config.redis.rpush(f"queue:{self.queue_name}", self.job)

    def __repr__(self) -> str:
        return f"BasicUnitOfWork({self.queue_name!r}, {self.job!r})"


class BasicFetch:
    """``BRPOP`` with Sidekiq's queue modes: strict (in the given order), random, or weighted
    (a queue of weight ``w`` is first in ``w`` out of ``sum(weights)`` fetches, on average)."""

    def __init__(self, capsule: Capsule) -> None:
        if not capsule.queues:
            raise ConfigError(f"capsule {capsule.name!r} has no queues to fetch from")
        self.capsule = capsule
        self.strict = capsule.mode == "strict"
        # as Sidekiq: each queue listed max(weight, 1) times; a shuffle + dedupe per fetch gives the weighting
        self._keys = [f"queue:{name}" for name, weight in capsule.queues for _ in range(max(weight, 1))]
        if self.strict:
            self._keys = list(dict.fromkeys(self._keys))
        self._names = {f"queue:{name}": name for name, _ in capsule.queues}

    def queue_keys(self) -> list[str]:
        """The keys for the next BRPOP, in priority order."""
        if self.strict:
            return self._keys
        return list(dict.fromkeys(random.sample(self._keys, len(self._keys))))

    def retrieve_work(self) -> BasicUnitOfWork | None:
        popped = self.capsule.config.redis.brpop(self.queue_keys(), timeout=TIMEOUT)
        if popped is None:
            return None
        key, job = cast(tuple[str, str], popped)  # the config's client decodes responses
        return BasicUnitOfWork(self._names[key], job, self)

    def bulk_requeue(self, units: list[UnitOfWork]) -> None:
        if not units:
            return
        by_queue: dict[str, list[str]] = {}
        for unit in units:
            by_queue.setdefault(f"queue:{unit.queue_name}", []).append(unit.job)
        try:
            pipe = self.capsule.config.redis.pipeline(transaction=False)
            for key, jobs in by_queue.items():
                pipe.rpush(key, *jobs)
            pipe.execute()
        except Exception as exc:
            log.error("failed to push %d jobs back to Redis, they are lost: %s: %r", len(units), exc, units)
            return
        log.info("pushed %d jobs back to Redis", len(units))


def fetcher_for(capsule: Capsule) -> Fetcher:
    """The fetcher that the ``fetch`` setting names: ``basic``, a plugin's name (``reliable`` is shipped and
    registered on demand), or ``module:Class`` / ``module.Class`` built as ``Class(capsule)``."""
    config = capsule.config
    name: str = config.fetch
    if name == "basic":
        return BasicFetch(capsule)
    if ":" in name:
        return _build(name, capsule)
    if name == "reliable":
        from .plugins import reliable_fetch

        if not config.plugins.is_registered(reliable_fetch):
            config.add_plugin(reliable_fetch, "reliable_fetch")
    fetcher: Fetcher | None = config.plugins.hook.kiq_fetcher(name=name, config=config, capsule=capsule)
    if fetcher is not None:
        return fetcher
    if "." in name:
        return _build(name, capsule)
    raise ConfigError(
        f"unknown fetch strategy {name!r}: use 'basic', 'reliable', a plugin's name (load the plugin with the "
        "plugins setting), or 'module:Class'"
    )


def _build(path: str, capsule: Capsule) -> Fetcher:
    """``Class(capsule)`` for the operator-written setting ``module:Class`` (never for data from Redis)."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"fetch strategy {path!r} cannot be loaded: {exc}") from exc
    fetcher: Fetcher = cls(capsule)
    return fetcher
