"""The fetcher seam, the batching hand-off that fetchers share, and BasicFetch.

BasicFetch is Sidekiq's basic fetch made cheaper per job: one round trip takes as many jobs as the capsule has
idle processor threads (``RPOP key count``, or a Lua script over several queues in Sidekiq's strict, random or
weighted order), and only when every queue is empty does a thread block in ``BRPOP`` (at most 2 s, so a quiet or
stop is noticed within 2 s). A job is out of Redis once fetched, so a crash loses the jobs in hand, never more
than one per thread (as Sidekiq's BRPOP per thread); a stop pushes them back with ``RPUSH`` (the end fetches take
from, so they run next). The ``reliable`` plugin keeps fetched jobs in Redis until they are acknowledged.
"""

from __future__ import annotations

import importlib
import logging
import random
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ConfigError
from .redis import DedicatedConnection

if TYPE_CHECKING:
    from .manager import Capsule

log = logging.getLogger("kiq")

TIMEOUT = 2  # seconds a fetch blocks; bounds how long a processor takes to notice a quiet or stop
MIN_BLOCK = 0.01  # Redis's blocking commands have millisecond resolution; shorter waits are not worth a call
QUEUE_PREFIX = "queue:"

# KEYS: queue keys in fetch order. ARGV: most jobs. Returns a flat list of queue key, job pairs, oldest first.
POP_SCRIPT = """
local wanted = tonumber(ARGV[1])
local fetched = {}
for i = 1, #KEYS do
  local jobs = redis.call('RPOP', KEYS[i], wanted)
  if jobs then
    for _, job in ipairs(jobs) do
      fetched[#fetched + 1] = KEYS[i]
      fetched[#fetched + 1] = job
    end
    wanted = wanted - #jobs
    if wanted == 0 then break end
  end
end
return fetched
"""


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


Fetched = tuple[str, str]  # (queue name without the prefix, raw job)
_WAKE: Any = object()  # put in a sleeping thread's mailbox: take a ready job (or, if none is left, fetch or sleep)
_LEAD: Any = object()  # put in a sleeping thread's mailbox: fetch next, for itself and the others idle


class BatchFetch:
    """One round trip serves every idle processor thread of a capsule, with as few thread wake-ups as possible.

    A thread asking for work takes a job already fetched (the *ready* deque) if there is one; else it becomes
    the leader if no fetch is under way, or sleeps on its own mailbox (a ``SimpleQueue``). The leader fetches at
    most one job per idle thread (the sleepers, those woken and not yet back, itself) minus the ready jobs, in
    one round trip; it keeps one and puts the rest into the ready deque. Waking a thread costs more than a
    no-op job, so sleepers are woken one at a time: a thread that takes a ready job wakes one sleeper if more
    jobs are ready and no wake-up is already under way; a thread that finishes its job in the meantime takes a
    ready job itself, and the sleepers it spared sleep on. So short jobs run on the threads already awake, and
    long ones still start within a chain of wake-ups.

    Invariant: ``len(ready) <= sleepers + woken`` (fetched jobs never outnumber the idle threads), so the process
    never holds a job that no idle thread is ready to run, and every ready job is taken before its sleeper's
    deadline passes (a sleeper whose time is up takes a ready job, if any, instead of returning None). Only one
    thread at a time talks to Redis to fetch, on its own connection. Subclasses implement ``_fetch``.
    """

    block_seconds: float = TIMEOUT

    def __init__(self, redis: Any) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._ready: deque[Fetched] = deque()  # fetched, not yet taken; oldest first
        self._sleepers: list[tuple[SimpleQueue[Any], float]] = []  # idle threads' mailboxes and deadlines
        self._woken = 0  # sleepers sent _WAKE that have not come for a job yet
        self._fetching = False  # a leader is at work
        self._closed = False
        self._local = threading.local()
        self.connection = DedicatedConnection(redis)  # used by the leader only

    def _fetch(self, wanted: int, block: float) -> list[Fetched]:
        """At most ``wanted`` jobs (at least one if ``block`` > 0 and a job comes within ``block`` s), oldest first.
        Called by the leader without the lock."""
        raise NotImplementedError

    def _next_job(self) -> Fetched | None:
        deadline = time.monotonic() + self.block_seconds
        box: SimpleQueue[Any] | None = getattr(self._local, "box", None)
        if box is None:
            box = self._local.box = SimpleQueue()
        with self._lock:
            if self._ready:
                return self._take_ready()
            if self._closed:
                return None
            if self._fetching:
                self._sleepers.append((box, deadline))
            else:
                self._fetching = True
                box = None
        return self._lead(deadline) if box is None else self._sleep(box, deadline)

    def _take_ready(self) -> Fetched:
        """The oldest ready job; wakes the next sleeper if more are ready. Called with the lock held."""
        job = self._ready.popleft()
        if self._ready and self._sleepers and not self._woken:
            self._wake(self._sleepers.pop())
        return job

    def _wake(self, sleeper: tuple[SimpleQueue[Any], float]) -> None:
        self._woken += 1
        sleeper[0].put(_WAKE)

    def _sleep(self, box: SimpleQueue[Any], deadline: float) -> Fetched | None:
        while True:
            try:
                signal = box.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                with self._lock:
                    if (box, deadline) in self._sleepers and (self._ready or not self._fetching or self._closed):
                        self._sleepers.remove((box, deadline))
                        return self._take_ready() if self._ready else None
                # a fetch under way counts on this thread (or a signal is on its way): its leader answers
                signal = box.get()
            if signal is _LEAD:
                return self._lead(deadline)
            with self._lock:
                self._woken -= 1
                if self._ready:
                    return self._take_ready()
                if self._fetching and not self._closed:
                    self._sleepers.append((box, deadline))  # the fetch under way counts on it: its leader answers
                    continue
                if self._closed or time.monotonic() >= deadline:
                    return None
                self._fetching = True
            return self._lead(deadline)

    def _lead(self, deadline: float) -> Fetched | None:
        """Fetch until this thread has a job or its time is up; then pass the lead on if idle threads are left
        without a ready job."""
        while True:
            with self._lock:
                wanted = len(self._sleepers) + self._woken + 1 - len(self._ready)
            try:
                jobs = self._fetch(wanted, deadline - time.monotonic()) if wanted > 0 else []
            except BaseException:
                with self._lock:
                    self._end_lead()  # the lead passes on; the error reaches this thread's processor
                raise
            with self._lock:
                self._ready.extend(jobs)
                mine = self._ready.popleft() if self._ready else None
                if mine is not None or self._closed or time.monotonic() >= deadline:
                    self._end_lead()
                    return mine

    def _end_lead(self) -> None:
        """Called with the lock held by a leader that is done: answer the sleepers whose time is up, hand the
        lead to a sleeper if there are more idle threads than ready jobs, and start the chain of wake-ups."""
        now = time.monotonic()
        waiting = []
        for sleeper in self._sleepers:
            if self._closed or sleeper[1] <= now:
                self._wake(sleeper)  # it takes a ready job if one is left, else returns None
            else:
                waiting.append(sleeper)
        self._sleepers = waiting
        if waiting and not self._closed and len(waiting) + self._woken > len(self._ready):
            waiting.pop()[0].put(_LEAD)
        else:
            self._fetching = False
            self._lock.notify_all()
        if self._ready and self._sleepers and not self._woken:
            self._wake(self._sleepers.pop())

    def _close(self, timeout: float) -> None:
        """Sleeping threads are answered now (with a ready job if one is left, else None) and later calls get
        None once no job is ready; returns once a fetch under way has ended."""
        with self._lock:
            self._closed = True
            for sleeper in self._sleepers:
                self._wake(sleeper)
            self._sleepers.clear()
            self._lock.wait_for(lambda: not self._fetching, timeout=timeout)


class BasicUnitOfWork:
    __slots__ = ("fetch", "job", "queue_name")

    def __init__(self, queue_name: str, job: str, fetch: BasicFetch) -> None:
        self.queue_name = queue_name
        self.job = job
        self.fetch = fetch

    def acknowledge(self) -> None:
        """Nothing to do: the fetch already removed the job from Redis."""

    def requeue(self) -> None:
        self.fetch.capsule.config.redis.rpush(QUEUE_PREFIX + self.queue_name, self.job)

    def __repr__(self) -> str:
        return f"BasicUnitOfWork({self.queue_name!r}, {self.job!r})"


class BasicFetch(BatchFetch):
    """Sidekiq's queue modes: strict (in the given order), random, or weighted (a queue of weight ``w`` is first
    in ``w`` out of ``sum(weights)`` fetches, on average); one order per round trip."""

    def __init__(self, capsule: Capsule) -> None:
        if not capsule.queues:
            raise ConfigError(f"capsule {capsule.name!r} has no queues to fetch from")
        super().__init__(capsule.config.redis)
        self.capsule = capsule
        self.strict = capsule.mode == "strict"
        # as Sidekiq: each queue listed max(weight, 1) times; a shuffle + dedupe per fetch gives the weighting
        self._keys = [QUEUE_PREFIX + name for name, weight in capsule.queues for _ in range(max(weight, 1))]
        if self.strict:
            self._keys = list(dict.fromkeys(self._keys))

    def queue_keys(self) -> list[str]:
        """The keys for the next fetch, in priority order."""
        if self.strict:
            return self._keys
        return list(dict.fromkeys(random.sample(self._keys, len(self._keys))))

    def retrieve_work(self) -> BasicUnitOfWork | None:
        fetched = self._next_job()
        return BasicUnitOfWork(fetched[0], fetched[1], self) if fetched is not None else None

    def _fetch(self, wanted: int, block: float) -> list[Fetched]:
        keys = self.queue_keys()
        prefix = len(QUEUE_PREFIX)
        if len(keys) == 1:
            jobs: list[str] | None = self.connection.command("RPOP", keys[0], wanted)
            if jobs:
                name = keys[0][prefix:]
                return [(name, job) for job in jobs]
        else:
            reply: list[str] = self.connection.script(POP_SCRIPT, keys, [wanted])
            if reply:
                return [(reply[i][prefix:], reply[i + 1]) for i in range(0, len(reply), 2)]
        if block < MIN_BLOCK:
            return []
        popped: list[str] | None = self.connection.command("BRPOP", *keys, round(min(block, TIMEOUT), 3))
        return [(popped[0][prefix:], popped[1])] if popped else []

    def bulk_requeue(self, units: list[UnitOfWork]) -> None:
        with self._lock:
            if not self._fetching:
                self.connection.release()  # taken again by the next fetch, if any
        if not units:
            return
        by_queue: dict[str, list[str]] = {}
        for unit in units:
            by_queue.setdefault(QUEUE_PREFIX + unit.queue_name, []).append(unit.job)
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
    """The fetcher that the ``fetch`` setting names: ``basic``, a plugin's name (``reliable`` is shipped; the
    setting registers it), or ``module:Class`` / ``module.Class`` built as ``Class(capsule)``."""
    config = capsule.config
    name: str = config.fetch
    if name == "basic":
        return BasicFetch(capsule)
    if ":" in name:
        return _build(name, capsule)
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
