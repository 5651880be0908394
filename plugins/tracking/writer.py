"""Batched background writes of job status, so tracking costs the job threads one dict merge and no I/O.

Job threads ``submit`` updates; a writer thread flushes them every ``tracking_flush_interval`` seconds (or at
once when ``tracking_batch_size`` are waiting) in one transaction. Pending updates are merged per job (status:
highest version wins; messages: appended in order), so memory is bounded by the number of distinct jobs waiting.
When the database is unreachable the updates stay pending (oldest dropped past ``tracking_max_pending``, which
is logged) and the flush is retried with exponential backoff; the outage and the recovery are logged once each.
When the database refuses a batch for another reason (a row it cannot take), the batch is split in halves until
the refused rows stand alone: every other update is written, and only those are dropped (each one logged).

An update's ``callbacks`` (the tracking middleware's acknowledgement holds) run once, in the writer thread, when
the update is committed or given up for good (dropped past ``tracking_max_pending`` or refused by the database),
never while it waits or is retried, and not at all for what ``close`` could not write in time.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger("kiq.tracking")

BACKOFF = (0.2, 5.0)  # seconds between flushes while the database is away: the first pause and the cap

Callback = Callable[[], None]


@dataclass(slots=True)
class Update:
    """What is known about one job since the last flush. ``status`` None: messages and progress only."""

    job_id: str
    task_id: str | None = None
    job_class: str = ""
    params: Any = None
    status: str | None = None
    version: int = 0
    attempts: int | None = None
    last_error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    at: float = field(default_factory=time.time)
    # run once by the writer thread when this update is committed or given up for good (see the module doc)
    callbacks: list[Callback] = field(default_factory=list)
    result: str | None = None  # the results plugin's record of the value returned, with a finished status
    progress: dict[str, Any] | None = None  # the job's latest self.progress(): {"done", "total", "at"}

    def absorb(self, newer: Update) -> None:
        """Become this update followed by ``newer`` (which arrived later); in place, as it runs on job threads."""
        if newer.messages:
            self.messages.extend(newer.messages)
        if newer.callbacks:
            self.callbacks.extend(newer.callbacks)
        if newer.progress is not None:
            self.progress = newer.progress
        self.at = newer.at
        if newer.task_id is not None:
            self.task_id, self.job_class, self.params = newer.task_id, newer.job_class, newer.params
        elif newer.job_class and not self.job_class:
            self.job_class, self.params = newer.job_class, newer.params
        if newer.status is not None and (self.status is None or newer.version >= self.version):
            self.status, self.version = newer.status, newer.version
            if newer.attempts is not None:
                self.attempts = newer.attempts
            if newer.last_error is not None:
                self.last_error = newer.last_error
            if newer.result is not None:
                self.result = newer.result


class Writer:
    """One background thread per Tracker that writes submitted updates in batches."""

    def __init__(self, store: Store, interval: float = 0.1, batch_size: int = 500, max_pending: int = 100_000) -> None:
        self.store = store
        self.interval = interval
        self.batch_size = batch_size
        self.max_pending = max_pending
        self._pending: dict[str, Update] = {}  # insertion order = oldest first
        self._in_flight: list[Update] = []  # the batch the writer thread is writing
        self._given_up: list[Callback] = []  # callbacks of updates dropped by _trim, for the writer thread to run
        self._abandoned = False  # close() gave up waiting: this thread runs no callback any more
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._outage_since: float | None = None
        self._late = False  # a submit_now's wait timed out: the next ones do not wait until a write succeeds
        self._dropped = 0

    # -- job threads --------------------------------------------------------------------------------
    def submit(self, update: Update) -> None:
        with self._lock:
            previous = self._pending.get(update.job_id)
            if previous is None:
                self._pending[update.job_id] = update
                self._trim(self._pending)
            else:
                previous.absorb(update)
            wake = len(self._pending) >= self.batch_size or bool(self._given_up)
            if self._thread is None:
                self._start()
        if wake and not self._wake.is_set():  # the writer is behind: wake it once, not on every submit
            self._wake.set()

    def submit_now(self, update: Update) -> threading.Event | None:
        """``submit``, and wake the writer now rather than at its next interval; the event is set once the update
        is written (or given up). None while the database is away: there is nothing to wait for then (a push must
        not block on an outage), or while an earlier wait timed out and no write has succeeded since (a database
        that hangs). Updates submitted together by several threads still share one transaction."""
        if self._outage_since is not None or self._late:
            self.submit(update)
            return None
        written = threading.Event()
        update.callbacks.append(written.set)
        self.submit(update)
        self._wake.set()
        return written

    def wait_written(self, written: threading.Event | None, timeout: float) -> None:
        """Wait for a ``submit_now`` update to be written, at most ``timeout``; a wait that times out stops the
        next ones until a write succeeds."""
        if written is not None and not written.wait(timeout):
            self._late = True

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._in_flight)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is written (and its callbacks ran); False if that took longer
        than ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._in_flight or self._given_up:
                if self._thread is None:
                    self._start()
                self._wake.set()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.05))
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Flush (waiting at most ``timeout``), log what could not be written, and stop the thread. The callbacks
        of what is left never run, even if a later flush writes it: the jobs they hold stay unacknowledged (and
        run again with reliable fetch) rather than being acknowledged after their worker shut down."""
        if not self.flush(timeout):
            self._abandon()
            log.error("tracking: %d job status updates could not be written before shutdown", self.pending)
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1)

    def _abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            for update in (*self._pending.values(), *self._in_flight):
                update.callbacks = []  # a new list: the writer thread may be reading the old one
            self._given_up = []

    # -- the writer thread --------------------------------------------------------------------------
    def _start(self) -> None:
        self._stop.clear()
        self._abandoned = False  # the previous thread has ended; what it left has no callbacks any more
        self._thread = threading.Thread(target=self._run, name="kiq-tracking-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close, 5.0)

    def _run(self) -> None:
        backoff = kiq.ext.Backoff(*BACKOFF)
        failing = False
        while not self._stop.is_set():
            if failing:  # the database is away: retry on the backoff schedule, not on every flush() call
                self._stop.wait(backoff.next())
            else:
                self._wake.wait(self.interval)
            self._wake.clear()
            failing = not self._flush_some()
            if not failing:
                backoff.reset()
        with self._lock:
            self._thread = None

    def _flush_some(self) -> bool:
        """Write batches until nothing is pending (True), or until the database is away (False)."""
        while True:
            with self._lock:
                given_up, self._given_up = self._given_up, []
            self._run_callbacks(given_up)
            with self._lock:
                if not self._pending:
                    if self._given_up:  # dropped by a submit meanwhile
                        continue
                    self._changed.notify_all()
                    return True
                keys = list(self._pending)[: self.batch_size]
                batch = [self._pending.pop(key) for key in keys]
                self._in_flight = batch
            try:
                self._write(batch)
            except self.store.outage_errors as exc:  # _write put back what it had not written
                if self._outage_since is None:
                    self._outage_since = time.monotonic()
                    log.warning("tracking: database unavailable, keeping updates and retrying: %s", exc)
                return False
            self._done()

    def _write(self, batch: list[Update]) -> None:
        """Write ``batch``, one transaction per part. A part the database refuses for a reason other than an
        outage is split in halves until the refused updates stand alone; those are given up. On an outage the
        parts not written yet go back to pending and the error propagates."""
        parts = deque([batch])
        while parts:
            part = parts.popleft()
            try:
                self.store.apply(part)
            except self.store.outage_errors:
                self._put_back([update for unwritten in (part, *parts) for update in unwritten])
                raise
            except Exception as exc:
                if len(part) > 1:
                    middle = len(part) // 2
                    parts.extendleft((part[middle:], part[:middle]))  # first half first: keeps the order
                else:
                    self._refused(part[0], exc)
                continue
            self._late = False
            self._recovered()
            self._run_callbacks([callback for update in part for callback in update.callbacks])

    def _refused(self, update: Update, exc: Exception) -> None:
        reason = getattr(exc, "orig", None) or exc  # the driver's error: SQLAlchemy's adds the statement and the batch
        log.error(
            "tracking: the database refused the status update of job %s; dropped it: %s: %s",
            update.job_id,
            type(reason).__name__,
            str(reason).strip(),
        )
        self._run_callbacks(update.callbacks)

    def _run_callbacks(self, callbacks: list[Callback]) -> None:
        for callback in callbacks:
            if self._abandoned:
                return
            try:
                callback()
            except Exception:
                log.exception("tracking: a callback of a written status update raised")

    def _put_back(self, batch: list[Update]) -> None:
        """Return a failed batch in front of what arrived meanwhile, so newer updates still win."""
        with self._lock:
            merged = {update.job_id: update for update in batch}
            for job_id, newer in self._pending.items():
                older = merged.get(job_id)
                if older is None:
                    merged[job_id] = newer
                else:
                    older.absorb(newer)
            self._trim(merged)
            self._pending = merged
            self._in_flight = []
            self._changed.notify_all()

    def _trim(self, pending: dict[str, Update]) -> None:
        """Drop the oldest updates beyond ``max_pending`` (caller holds the lock); the first drop is logged. Their
        callbacks are left for the writer thread (this runs on job threads too)."""
        while len(pending) > self.max_pending:  # (a bare ``while`` test when under the limit: job threads call it)
            dropped = pending.pop(next(iter(pending)))
            self._given_up.extend(dropped.callbacks)
            self._dropped += 1
            if self._dropped == 1:
                log.error("tracking: more than %d updates pending; dropping the oldest", self.max_pending)

    def _done(self) -> None:
        with self._lock:
            self._in_flight = []
            self._changed.notify_all()

    def _recovered(self) -> None:
        if self._outage_since is not None:
            seconds = time.monotonic() - self._outage_since
            self._outage_since = None
            with self._lock:
                dropped, self._dropped = self._dropped, 0
            log.warning(
                "tracking: database is back after %.1fs; pending updates written (%d dropped over the limit)",
                seconds,
                dropped,
            )
