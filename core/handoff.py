"""The hand-off engine fetchers share: one Redis round trip serves every idle processor thread of a capsule.

``BatchFetch`` is the base of both shipped fetchers (basic and reliable) and a building block for a fetch
plugin: subclass it, implement ``pop(wanted, block)``, and call ``next_job()`` from ``retrieve_work`` (the seam is
in the class's docstring and docs/guide/plugins.md, "Writing a fetcher"; the shipped fetchers use nothing else).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import Any

from .connection import DedicatedConnection
from .fetcher import MAX_BLOCK, MIN_BLOCK, TIMEOUT

Fetched = tuple[str, str]  # (queue name without the prefix, raw job)
_WAKE: Any = object()  # put in a sleeping thread's mailbox: take a ready job (or, if none is left, fetch or sleep)
_LEAD: Any = object()  # put in a sleeping thread's mailbox: fetch next, for itself and the others idle
# put in the mailbox of a sleeper whose time is up, by the leader that ends its fetch: take a ready job if one is
# left, else return None (no fetch counts on it any more: it is out of the sleepers before the next leader counts)
_EXPIRE: Any = object()


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

    Prefetch (``prefetch``, 0 by default): while fetches come back full (the queues keep a backlog), a fetch may
    bring up to ``prefetch`` jobs more than the idle threads, doubling from the idle threads' number, so a drain
    takes more jobs per round trip; threads that finish take them from the ready deque. A fetch that comes back
    short ends it. For a fetcher whose fetched jobs stay in Redis until acknowledged (jobs held in memory are
    lost with the process), and ``take_unstarted`` gives them back at a quiet.

    Invariant, without prefetch: ``len(ready) <= sleepers + woken`` (fetched jobs never outnumber the idle
    threads), so the process never holds a job that no idle thread is ready to run, and every ready job is taken
    before its sleeper's deadline passes (a sleeper whose time is up takes a ready job, if any, instead of
    returning None; the leader that ends its fetch answers it once, and no later fetch counts it, so it is not
    woken at every job). Only one thread at a time talks to Redis to fetch, on its own connection, unless
    ``leaders`` is 2 or more.

    Several leaders (``leaders``, 1 by default): at light load up to that many threads fetch at once, each on a
    connection of its own, each asking for the idle threads the others have not asked for. Two blocking pops are
    parked: the thread a job wakes runs it while the other pop waits on, so no sleeper has to be woken to take over
    the waiting (one thread woken a job, as a pop per thread is, where passing the lead on after every job took two).
    A leader passes the lead on when it was the last one fetching, or when its fetch came back full while threads
    still sleep. Under a backlog (the last fetch of several jobs came back full) one leader fetches at a time, as
    with ``leaders = 1``: the threads that finish wait for its batch instead of each fetching for itself. For a
    fetcher whose ``pop`` may run in two threads at once.

    None means "Redis had no job": a thread whose wait ends without a job while the latest fetch failed raises that
    failure (a copy), as its leader did, so that its processor does not take the outage for over (a worker logs an
    outage once, until a fetch works again: kiq.server.outcomes.RedisOutage).

    The seam (public names only; a subclass keeps its own state under its own names):

    - ``pop(wanted, block)``: implement it, the one swappable part: up to ``wanted`` jobs in one round trip, as
      ``(queue name, raw job)`` pairs oldest first, waiting up to ``block`` s for the first one when
      ``block >= min_block``. Only a leader calls it, without the engine's lock: one call at a time unless
      ``leaders`` > 1, so it may keep bookkeeping of its own unlocked; it talks to Redis on ``connection`` (each
      leader's own). What it raises reaches the leader's processor (an outage) and, as a copy, the threads that
      waited on it.
    - ``next_job()``: call it from ``retrieve_work`` and wrap what it returns in the fetcher's unit of work
      (``kiq.ext.UnitOfWork``); None after ``block_seconds`` without a job, or once closed with none ready.
    - ``bulk_requeue(units)``: implement it (the ``kiq.ext.Fetcher`` seam); ``heartbeat()`` and ``quiet()`` are no-ops
      here, to override when the fetcher keeps something alive or holds something back.
    - ``close(timeout)``: stops the hand-off (waiting threads get None), waits up to ``timeout`` for a fetch under
      way, then releases ``connection``; an override calls it first, then gives back what the fetcher holds.
    - ``take_unstarted()``: the ready jobs no thread took, out of the hand-off (a quiet gives them back).
    - read-only state: ``closed``; settings: ``block_seconds``, ``min_block``, ``prefetch``, ``leaders``.
    """

    # the longest a thread waits for work before retrieve_work returns None (so it notices a quiet or stop): the
    # class's default, or this fetcher's own, given to __init__ or set on the instance before it fetches (e.g. a
    # test's short wait); each call to retrieve_work reads it once
    block_seconds: float = TIMEOUT
    min_block: float = MIN_BLOCK  # a shorter wait is not worth a blocking Redis call
    prefetch: int = 0  # the most jobs a fetch brings beyond the idle threads while the queues keep a backlog
    leaders: int = 1  # threads that may fetch at once, each on its own connection (more only if pop is thread-safe)

    def __init__(self, redis: Any, block_seconds: float | None = None) -> None:
        if block_seconds is not None:
            self.block_seconds = block_seconds
        self._lock = threading.Condition(threading.Lock())
        self._ready: deque[Fetched] = deque()  # fetched, not yet taken; oldest first
        self._sleepers: list[tuple[SimpleQueue[Any], float]] = []  # idle threads' mailboxes and deadlines
        self._woken = 0  # sleepers sent _WAKE that have not come for a job yet
        self._leading = 0  # leaders at work (at most ``leaders``)
        self._asked = 0  # the most jobs the leaders' fetches under way may bring
        self._backlog = False  # the last fetch of more than one job came back full: one leader batches best
        self._closed = False
        self._failure: Exception | None = None  # what the latest fetch raised; None once one works
        self._ahead = 0  # jobs the next fetch brings beyond the idle threads (prefetch): grows while fetches are full
        self._local = threading.local()
        self._redis = redis
        self._connections = [DedicatedConnection(redis)]  # one per leader at work, made as needed
        self._free = list(self._connections)  # those no leader uses now

    @property
    def connection(self) -> DedicatedConnection:
        """The calling leader's connection (the first one, outside a fetch)."""
        connection: DedicatedConnection | None = getattr(self._local, "connection", None)
        return connection or self._connections[0]

    def pop(self, wanted: int, block: float) -> list[Fetched]:
        """At most ``wanted`` jobs (at least one if ``block`` > 0 and a job comes within ``block`` s), oldest first.
        Called by the leader without the lock."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """``close`` was called: no job is handed out any more."""
        return self._closed

    def next_job(self) -> Fetched | None:
        """The next job for the calling processor thread: a ready one, or one it fetches (``pop``) as the leader
        or is handed while it sleeps; None after ``block_seconds`` without one, or once closed with none ready."""
        deadline = time.monotonic() + self.block_seconds
        box: SimpleQueue[Any] | None = getattr(self._local, "box", None)
        if box is None:
            box = self._local.box = SimpleQueue()
        with self._lock:
            if self._ready:
                return self._take_ready()
            if self._closed:
                return None
            if self._may_lead():
                self._leading += 1
                box = None
            else:
                self._sleepers.append((box, deadline))
        return self._lead(deadline) if box is None else self._sleep(box, deadline)

    def _may_lead(self) -> bool:
        """Whether a thread asking for work fetches (else it sleeps): no one fetches, or fewer than ``leaders`` do, the
        queues keep no backlog (under one, the threads that finish wait for the next fetch, which brings a batch for
        all of them, where a second leader would fetch for fewer) and the idle threads outnumber the jobs ready and
        asked for. Called with the lock held."""
        if not self._leading:
            return True
        if self._leading >= self.leaders or self._backlog:
            return False
        idle = len(self._sleepers) + self._woken + self._leading + 1
        return idle + self._ahead > len(self._ready) + self._asked

    def _take_ready(self) -> Fetched:
        """The oldest ready job; wakes the next sleeper if more are ready, or, if this was the last one and no
        fetch is under way, so that it fetches (the job was fetched for it, and a thread already awake took it).
        Called with the lock held."""
        job = self._ready.popleft()
        if self._sleepers and not self._woken and (self._ready or not self._leading):
            self._wake(self._sleepers.pop())
        return job

    def _ready_or_none(self) -> Fetched | None:
        """For a thread whose time is up: a ready job if one is left, else None (or the latest fetch's failure, as
        its leader raised it). Called with the lock held."""
        if self._ready:
            return self._take_ready()
        self._raise_failure()
        return None

    def _wake(self, sleeper: tuple[SimpleQueue[Any], float]) -> None:
        self._woken += 1
        sleeper[0].put(_WAKE)

    def _sleep(self, box: SimpleQueue[Any], deadline: float) -> Fetched | None:
        while True:
            try:
                signal = box.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                with self._lock:
                    if (box, deadline) in self._sleepers and (self._ready or not self._leading or self._closed):
                        self._sleepers.remove((box, deadline))
                        return self._ready_or_none()
                # a fetch under way counts on this thread (or a signal is on its way): its leader answers
                signal = box.get()
            if signal is _LEAD:
                return self._lead(deadline)
            if signal is _EXPIRE:
                with self._lock:
                    return self._ready_or_none()
            with self._lock:
                self._woken -= 1
                if self._ready:
                    return self._take_ready()
                if not self._closed and not self._may_lead():
                    self._sleepers.append((box, deadline))  # the fetch under way counts on it: its leader answers
                    continue
                if self._closed:
                    return None
                if time.monotonic() >= deadline:
                    self._raise_failure()
                    return None
                self._leading += 1
            return self._lead(deadline)

    def _lead(self, deadline: float) -> Fetched | None:
        """Fetch until this thread has a job or its time is up; then pass the lead on if idle threads are left
        without a ready job and no other leader fetches for them."""
        with self._lock:
            connection = self._free.pop() if self._free else self._new_connection()
        self._local.connection = connection
        while True:
            with self._lock:
                idle = len(self._sleepers) + self._woken + self._leading
                wanted = max(0, idle + self._ahead - len(self._ready) - self._asked)
                if not wanted and not self._ready:  # the other leaders' fetches count on this thread
                    self._end_lead(connection, full=False)
                    return None
                self._asked += wanted
            try:
                # at most MAX_BLOCK per call: the next one builds its queue list again (a queue paused or unpaused)
                block = min(deadline - time.monotonic(), MAX_BLOCK)
                jobs = self.pop(wanted, block) if wanted > 0 else []
            except BaseException as exc:
                with self._lock:
                    self._asked -= wanted
                    if isinstance(exc, Exception):  # not a stop (Shutdown, KeyboardInterrupt): that is this thread's
                        self._failure = exc
                    self._end_lead(connection, full=False)  # the lead passes on; the error reaches its processor
                raise
            with self._lock:
                self._asked -= wanted
                self._failure = None
                full = len(jobs) >= wanted > 0
                if wanted > 1:  # a fetch of one job full says nothing of a backlog
                    self._backlog = full
                if self.prefetch:  # full: a backlog, so bring more next time; short: the queues are empty
                    self._ahead = min(self.prefetch, max(idle, 2 * self._ahead)) if full else 0
                self._ready.extend(jobs)
                mine = self._ready.popleft() if self._ready else None
                if mine is not None or self._closed or time.monotonic() >= deadline:
                    self._end_lead(connection, full=full and wanted > 1)
                    return mine

    def _new_connection(self) -> DedicatedConnection:
        connection = DedicatedConnection(self._redis)
        self._connections.append(connection)
        return connection

    def _raise_failure(self) -> None:
        """Before a waiting thread returns without a job (called with the lock held): when the latest fetch failed,
        raise that failure here too (a copy: the leader's is being raised in its own thread)."""
        if self._failure is None or self._closed:
            return
        try:
            failure = copy.copy(self._failure)
        except Exception:  # an exception class that cannot be rebuilt from its args: the same object, then
            failure = self._failure
        raise failure

    def _end_lead(self, connection: DedicatedConnection, full: bool) -> None:
        """Called with the lock held by a leader that is done: answer the sleepers whose time is up, hand the
        lead to a sleeper if there are more idle threads than ready jobs and asked for, unless another leader fetches
        and this fetch found no backlog (``full``), and start the chain of wake-ups."""
        self._free.append(connection)
        self._local.connection = None
        now = time.monotonic()
        waiting = []
        for sleeper in self._sleepers:
            if self._closed or sleeper[1] <= now:
                # not a _WAKE: a woken thread that finds a fetch under way sleeps on, and one whose time is up
                # would be woken again by every later leader, at every job
                sleeper[0].put(_EXPIRE)
            else:
                waiting.append(sleeper)
        self._sleepers = waiting
        needed = len(waiting) + self._woken > len(self._ready) + self._asked
        if waiting and not self._closed and needed and (self._leading == 1 or full):
            waiting.pop()[0].put(_LEAD)
        else:
            self._leading -= 1
            if not self._leading:
                self._lock.notify_all()
        if self._ready and self._sleepers and not self._woken:
            self._wake(self._sleepers.pop())

    def take_unstarted(self) -> list[Fetched]:
        """The ready jobs no thread has taken (prefetched ones), oldest first, now out of the hand-off: a fetcher
        gives them back to their queues when its threads stop asking (a quiet)."""
        with self._lock:
            jobs = list(self._ready)
            self._ready.clear()
            self._ahead = 0
            return jobs

    def heartbeat(self) -> None:
        """Called on every heartbeat of the process: nothing to keep alive here."""

    def quiet(self) -> None:
        """No more work will be asked for: nothing to do here (the processors stop asking)."""

    def close(self, timeout: float = TIMEOUT) -> None:
        """Sleeping threads are answered now (with a ready job if one is left, else None) and later calls get
        None once no job is ready; once a fetch under way has ended (or ``timeout`` s passed), the connection goes
        back to its pool, unless that fetch is still using it."""
        with self._lock:
            self._closed = True
            for sleeper in self._sleepers:
                self._wake(sleeper)
            self._sleepers.clear()
            self._lock.wait_for(lambda: not self._leading, timeout=timeout)
            if not self._leading:
                for connection in self._connections:
                    connection.release()
