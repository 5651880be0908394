"""The fetcher seam: what a fetch strategy is given (a ``Capsule``) and what it provides (a ``Fetcher`` of
``UnitOfWork``s), plus what fetchers share: Sidekiq's queue order and the Lua that pops a batch in that order.

The worker drives a fetcher's whole life: ``retrieve_work`` from every processor thread, ``heartbeat`` on every
heartbeat, ``quiet`` when fetching stops, ``bulk_requeue`` for jobs a stop interrupts, and ``close`` last, after
the shutdown hooks. A class that subclasses ``Fetcher`` explicitly inherits no-op ``heartbeat``/``quiet``/``close``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .keys import Keyspace, keyspace
from .paused_queues import PausedQueues, paused_queues
from .settings import Queues

if TYPE_CHECKING:
    from .config import Config
    from .hookspecs import JobSource

# seconds a fetch blocks at most: bounds how long a processor takes to notice a quiet or stop (the default of
# kiq.ext.BatchFetch.block_seconds, which a fetcher class or a single fetcher may set lower)
TIMEOUT = 2
# seconds one blocking fetch waits at most: a thread blocked on a queue that was paused meanwhile (or not on one
# unpaused) stops (starts) taking from it within this plus the paused set's refresh (kiq.paused_queues)
MAX_BLOCK = 0.5
MIN_BLOCK = 0.01  # Redis's blocking commands have millisecond resolution; shorter waits are not worth a call


@dataclass
class Capsule:
    """A named group of processor threads with its own queues (the ``default`` one comes from the ``queues`` and
    ``concurrency`` settings; ``config.add_capsule`` declares more)."""

    name: str
    queues: Queues  # (name, weight); weight 0 = none given
    concurrency: int
    config: Config
    identity: str = ""  # the worker process's

    @property
    def mode(self) -> Literal["strict", "random", "weighted"]:
        """Sidekiq's rule: no weights → strict order; all weights 1 → random; anything else → weighted."""
        weights = [weight for _, weight in self.queues]
        if all(weight == 0 for weight in weights):
            return "strict"
        if all(weight == 1 for weight in weights):
            return "random"
        return "weighted"

    @property
    def weights(self) -> dict[str, int]:
        """Queue name → weight, as Sidekiq reports a capsule's weights in the process info."""
        return dict(self.queues)

    def job_source(self) -> JobSource | None:
        """Where this capsule's fetchers take jobs from when a plugin says (``kiq_job_source``, e.g. round-robin over
        job groups); None: the queues' lists."""
        source: JobSource | None = self.config.plugins.hook.kiq_job_source(capsule=self)
        return source

    def queue_order(self) -> QueueOrder:
        """The capsule's queue order, leaving out the paused queues: what a fetcher fetches from."""
        redis = self.config.redis
        return QueueOrder(self.queues, self.mode, paused_queues(redis), keyspace(redis))


class UnitOfWork(Protocol):
    """One fetched job: its queue name (without ``queue:``) and the raw JSON as fetched."""

    queue_name: str
    job: str

    def acknowledge(self) -> None: ...

    def requeue(self) -> None: ...


class Fetcher(Protocol):
    """A fetch strategy for one capsule of one worker process."""

    def retrieve_work(self) -> UnitOfWork | None:
        """The next job, or None after blocking at most ~2 s (so a quiet or stop is noticed)."""
        ...

    def bulk_requeue(self, units: Sequence[UnitOfWork]) -> None:
        """Give these jobs back to their queues: a stop ran out of time while they ran."""
        ...

    def heartbeat(self) -> None:
        """Called on every heartbeat of the process."""

    def quiet(self) -> None:
        """No more work will be asked for."""

    def close(self) -> None:
        """Stop for good (after the shutdown hooks): release connections, give back what is still held."""


class QueueOrder:
    """The queue keys to fetch from, in Sidekiq's modes: strict (in the given order), random, or weighted (a
    queue of weight ``w`` comes first in ``w`` out of ``sum(weights)`` fetches, on average); one order per fetch.
    With a ``paused`` view, the paused queues are left out (the others keep their order and weights); every
    queue may be paused, and then there are no keys. On a cluster with ``slots = "queue"``, ``groups`` cuts an order
    into what one command can fetch from (queues of one slot), to fetch from slot after slot."""

    def __init__(
        self, queues: Queues, mode: str, paused: PausedQueues | None = None, keys: Keyspace | None = None
    ) -> None:
        self.strict = mode == "strict"
        self.keyspace = keys or Keyspace()
        # as Sidekiq: each queue listed max(weight, 1) times; a shuffle + dedupe per fetch gives the weighting
        self._keys = [self.keyspace.queue(name) for name, weight in queues for _ in range(max(weight, 1))]
        self._distinct = list(dict.fromkeys(self._keys))
        self.paused = paused

    @property
    def distinct(self) -> list[str]:
        """Every queue's key once, in the given order, but the paused ones."""
        return self._unpaused(self._distinct)

    def keys(self) -> list[str]:
        """The keys for the next fetch, in priority order."""
        if self.strict:
            return self.distinct
        return self._unpaused(list(dict.fromkeys(random.sample(self._keys, len(self._keys)))))

    def groups(self, keys: list[str]) -> list[list[str]]:
        """``keys`` (an order of ``keys()``) in runs of one hash slot: a single run but on a cluster whose queues
        have their own slots."""
        return self.keyspace.slot_groups(keys)

    def _unpaused(self, keys: list[str]) -> list[str]:
        paused = self.paused.keys() if self.paused is not None else None
        return [key for key in keys if key not in paused] if paused else keys


def pop_script(first_queue_key: int = 1, into: int | None = None, before: str = "", paired: bool = False) -> str:
    """Lua that pops up to ``ARGV[1]`` jobs from the queues ``KEYS[first_queue_key:]`` in their order (``RPOP key
    count``), pushing them into ``KEYS[into]`` too when given (a working list), after the statements ``before``.
    ``paired``: the keys from ``first_queue_key - 1`` on alternate (list, queue), and each queue's jobs go into the
    list before it (a reliable fetcher's working list per queue, in that queue's slot). Returns, per queue that had
    jobs, its key, how many, then its jobs, oldest first (read by ``popped_jobs``): not a key per job, which would
    double the reply Redis builds. Jobs are opaque strings: never decoded."""
    destination = "KEYS[i - 1]" if paired else f"KEYS[{into}]" if into is not None else None
    move = f"redis.call('LPUSH', {destination}, unpack(jobs))" if destination is not None else ""
    return f"""{before}
local wanted = tonumber(ARGV[1])
local fetched = {{}}
for i = {first_queue_key}, #KEYS{", 2" if paired else ""} do
  local jobs = redis.call('RPOP', KEYS[i], wanted)
  if jobs then
    {move}
    fetched[#fetched + 1] = KEYS[i]
    fetched[#fetched + 1] = #jobs
    for _, job in ipairs(jobs) do
      fetched[#fetched + 1] = job
    end
    wanted = wanted - #jobs
    if wanted == 0 then break end
  end
end
return fetched
"""


def popped_jobs(reply: list[Any], keys: Keyspace) -> list[tuple[str, str]]:
    """(queue name, job) pairs, oldest first, from the reply of a ``pop_script`` (on a Redis of keyspace ``keys``)."""
    jobs: list[tuple[str, str]] = []
    at = 0
    while at < len(reply):
        name, count = keys.queue_name(reply[at]), reply[at + 1]
        jobs += [(name, job) for job in reply[at + 2 : at + 2 + count]]
        at += 2 + count
    return jobs
