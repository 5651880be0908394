"""BasicFetch (Sidekiq's basic fetch, made cheaper per job), and which fetcher the ``fetch`` setting names.

One round trip takes as many jobs as the capsule has idle processor threads: on Redis 7 a fetch that may wait is one
``BLMPOP`` over the queues in Sidekiq's strict, random or weighted order, which blocks at once when every queue is
empty (at most 2 s, so a quiet or stop is noticed within 2 s) and takes a batch from the first queue with jobs;
otherwise (before Redis 7, on a cluster, a fetch that may not wait) ``RPOP key count`` or a Lua script over several
queues, then ``BRPOP`` when every queue is empty. Two such fetches may wait at once, each on its own connection
(``BatchFetch.leaders``): at light load the thread a job wakes runs it while the other keeps waiting. A job is out of
Redis once fetched, so a crash loses the jobs in hand, never more than one per thread (as Sidekiq's BRPOP per thread); a
stop pushes them back with ``RPUSH`` (the end fetches take from, so they run next). The ``reliable`` plugin keeps
fetched jobs in Redis until they are acknowledged.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Sequence

from redis.exceptions import ResponseError

from ..errors import ConfigError
from ..failures import TRANSIENT
from ..fetcher import MIN_BLOCK, TIMEOUT, Capsule, Fetcher, UnitOfWork, pop_script, popped_jobs
from ..handoff import BatchFetch, Fetched
from ..keys import keyspace
from ..scripts import lua_script
from ..settings import did_you_mean

log = logging.getLogger("kiq")

# KEYS: the keys of queues of one slot, in fetch order; ARGV: most jobs
POP = lua_script("fetch.pop", pop_script(), lambda keys, queues: [keys.queue(name) for name in queues])


class BasicUnitOfWork:
    __slots__ = ("fetch", "job", "queue_name")

    def __init__(self, queue_name: str, job: str, fetch: BasicFetch) -> None:
        self.queue_name = queue_name
        self.job = job
        self.fetch = fetch

    def acknowledge(self) -> None:
        """Nothing to do: the fetch already removed the job from Redis."""

    def requeue(self) -> None:
        redis = self.fetch.capsule.config.redis
        redis.rpush(keyspace(redis).queue(self.queue_name), self.job)

    def __repr__(self) -> str:
        return f"BasicUnitOfWork({self.queue_name!r}, {self.job!r})"


class BasicFetch(BatchFetch):
    """The default fetcher (``fetch = "basic"``). On a cluster whose queues have their own slots, one round trip
    per slot in the queue order, until one has jobs; blocking, it waits on the first slot's queues only (at most
    ``MAX_BLOCK``, then the order is tried again): a job pushed meanwhile to another slot waits that long at most."""

    def __init__(self, capsule: Capsule) -> None:
        if not capsule.queues:
            raise ConfigError(f"capsule {capsule.name!r} has no queues to fetch from")
        super().__init__(capsule.config.redis)
        self.capsule = capsule
        self.order = capsule.queue_order()
        self.keys = self.order.keyspace
        self.source = capsule.job_source()  # a plugin's (kiq_job_source), or None: the queues' lists
        # two blocking pops parked at light load, so the thread a job wakes runs it while the other waits on: one
        # thread woken per job. Not over a plugin's job source (it may not take two fetches at once), nor on a
        # cluster (its client routes each command itself: no connection of the fetcher's own to block on)
        self.leaders = 2 if self.source is None and not self.keys.cluster else 1
        self._multi_pop = True  # BLMPOP (Redis 7) until the server says it has none

    def retrieve_work(self) -> BasicUnitOfWork | None:
        fetched = self.next_job()
        return BasicUnitOfWork(fetched[0], fetched[1], self) if fetched is not None else None

    def pop(self, wanted: int, block: float) -> list[Fetched]:
        keys = self.order.keys()
        if not keys:  # every queue is paused: wait as a fetch would (the pause is read again meanwhile)
            time.sleep(max(0.0, block))
            return []
        groups = self.order.groups(keys)
        if self.source is not None:
            return self._pop_source(groups, wanted, block)
        if self._multi_pop and not self.keys.cluster and block >= MIN_BLOCK:
            popped_at_once = self._multi_pop_from(keys, wanted, block)
            if popped_at_once is not None:
                return popped_at_once
        for group in groups:
            if len(group) == 1:
                jobs: list[str] | None = self.connection.command("RPOP", group[0], wanted)
                if jobs:
                    name = self.keys.queue_name(group[0])
                    return [(name, job) for job in jobs]
            else:
                reply: list[str | int] = self.connection.script(POP.source, group, [wanted])
                if reply:
                    return popped_jobs(reply, self.keys)
        if block < MIN_BLOCK:
            return []
        popped: list[str] | None = self.connection.command("BRPOP", *groups[0], round(min(block, TIMEOUT), 3))
        return [(self.keys.queue_name(popped[0]), popped[1])] if popped else []

    def _pop_source(self, groups: list[list[str]], wanted: int, block: float) -> list[Fetched]:
        """``pop`` from a plugin's ``JobSource``: slot group after slot group, then its wait on the first."""
        source = self.source
        assert source is not None
        names = [[self.keys.queue_name(key) for key in group] for group in groups]
        for queues in names:
            jobs = source.pop(self.connection, queues, wanted)
            if jobs:
                return jobs
        if block < MIN_BLOCK:
            return []
        return source.block(self.connection, names[0], round(min(block, TIMEOUT), 3))

    def _multi_pop_from(self, keys: list[str], wanted: int, block: float) -> list[Fetched] | None:
        """Redis 7: one command, blocking at once (``BLMPOP``) and taking up to ``wanted`` jobs from the first queue
        in ``keys`` that has any: at light load one blocking command per job, under load a batch per round trip.
        None on an older Redis (then never again: the pop and ``BRPOP`` serve)."""
        try:
            timeout = round(min(block, TIMEOUT), 3)
            reply = self.connection.command("BLMPOP", timeout, len(keys), *keys, "RIGHT", "COUNT", wanted)
        except ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            self._multi_pop = False
            return None
        if not reply:
            return []
        name: str = self.keys.queue_name(reply[0])
        jobs: list[str] = reply[1]
        return [(name, job) for job in jobs]

    def bulk_requeue(self, units: Sequence[UnitOfWork]) -> None:
        """Push ``units`` back to their queues; raises what Redis refused with (unreachable, OOM, READONLY)."""
        if not units:
            return
        by_queue: dict[str, list[str]] = {}
        for unit in units:
            by_queue.setdefault(self.keys.queue(unit.queue_name), []).append(unit.job)
        try:
            pipe = self.capsule.config.redis.pipeline(transaction=False)
            for key, jobs in by_queue.items():
                pipe.rpush(key, *jobs)
            pipe.execute()
        except TRANSIENT:
            raise  # Redis cannot take them now: the manager holds them (kiq.server.outcomes), never "lost"
        except Exception as exc:
            log.error("failed to push %d jobs back to Redis, they are lost: %s: %r", len(units), exc, units)
            return
        log.info("pushed %d jobs back to Redis", len(units))


def fetcher_for(capsule: Capsule) -> Fetcher:
    """The fetcher the ``fetch`` setting names: ``basic``, the name of a plugin's fetcher (``reliable`` is
    shipped), or ``module:Class`` (built as ``Class(capsule)``)."""
    config = capsule.config
    name: str = config.fetch
    if name == "basic":
        return BasicFetch(capsule)
    if ":" in name:
        return _build(name, capsule)
    fetcher: Fetcher | None = config.plugins.hook.kiq_fetcher(name=name, config=config, capsule=capsule)
    if fetcher is not None:
        return fetcher
    from ..config import FETCHERS_GROUP

    known = ["basic", *(entry.name for entry in importlib.metadata.entry_points(group=FETCHERS_GROUP))]
    raise ConfigError(
        f"unknown fetch strategy {name!r}{did_you_mean(name, known)}: use one of {', '.join(known)}, a fetcher a "
        "loaded plugin provides, or 'module:Class'"
    )


def _build(path: str, capsule: Capsule) -> Fetcher:
    """``Class(capsule)`` for the operator-written setting ``module:Class`` (never for data from Redis)."""
    module_name, _, attr = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"fetch strategy {path!r} cannot be loaded: {exc}") from exc
    fetcher: Fetcher = cls(capsule)
    return fetcher
