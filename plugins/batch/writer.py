"""Job outcomes reach their batches from one background thread per config, while each job's acknowledgement is
held (``kiq.ext.hold_acknowledgement``) until its outcome is written.

So a job leaves Redis only after its batch counted it: with reliable fetch, a worker killed in between, or Redis
failing the write, leaves the job in its working list, and it runs again (its outcome is written again: the
batch program counts a jid once). Job threads and event loops only append to a list; the thread writes what is
waiting in one pipelined round trip, and keeps what Redis refused, retrying with a backoff (an outage is logged
once when it starts and once when it ends) while the jobs stay unacknowledged. An outcome found outside a running
job (a death found by reliable fetch's recovery, ``DeadSet.kill``) has no acknowledgement to hold: it is written at
once, by the caller.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis as redis_py

import kiq
import kiq.ext

from .scripts import Changes

log = logging.getLogger("kiq.batch")

MAX_WRITE = 500  # outcomes per round trip
BACKOFF = (0.1, 5.0)  # seconds between writes while Redis refuses them: the first pause and the cap


@dataclass(slots=True)
class Outcome:
    op: str  # succeeded, failed or died
    bid: str
    jid: str
    release: Callable[[], None]


class OutcomeWriter:
    def __init__(self, changes: Changes) -> None:
        self.changes = changes
        self._waiting: list[Outcome] = []  # oldest first; what Redis refused stays at the front
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._abandoned = False  # close() gave up waiting: nothing written from now on is acknowledged
        self._failing_since: float | None = None
        atexit.register(self.close, 5.0)

    def submit(self, op: str, bid: str, jid: str) -> None:
        """Record a job's outcome in its batch: from a running job, by this thread, holding the job's
        acknowledgement until it is written; from anywhere else, now."""
        release = kiq.ext.hold_acknowledgement()
        if release is None:
            self.changes.run(self.changes.argv(op, bid, jid))
            return
        with self._changed:
            self._waiting.append(Outcome(op, bid, jid, release))
            if self._thread is None:
                self._start()
            self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far is written; False if that took longer than ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what waits (for at most ``timeout``), then stop the thread. What is left is never released: those
        jobs stay unacknowledged (reliable fetch gives them back) rather than leave Redis uncounted."""
        if not self.flush(timeout):
            with self._changed:
                left, self._waiting, self._abandoned = len(self._waiting), [], True
            log.error("batch: %d job outcomes could not be written before the stop; those jobs run again", left)
        with self._changed:
            self._stop = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2)

    # -- the writer thread ------------------------------------------------------------------------------
    def _start(self) -> None:
        self._stop = self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="kiq-batch-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = kiq.ext.Backoff(*BACKOFF)
        failing = False
        while True:
            with self._changed:
                while not self._waiting and not self._stop:
                    self._changed.wait()
                if self._stop:
                    self._thread = None
                    return
                batch = self._waiting[:MAX_WRITE]
            if failing:
                time.sleep(backoff.next())
            written = self._write(batch)
            with self._changed:
                done = set(map(id, written))
                self._waiting = [outcome for outcome in self._waiting if id(outcome) not in done]
                self._changed.notify_all()
                if self._abandoned:  # the worker stopped meanwhile: its fetchers gave these jobs back already
                    written = []
            for outcome in written:
                outcome.release()
            failing = len(written) != len(batch)
            if not failing:
                backoff.reset()

    def _write(self, batch: list[Outcome]) -> list[Outcome]:
        """Run the outcomes in one pipeline; the ones Redis took (a change is idempotent, so a batch partly written
        before an error can simply be sent again)."""
        changes = _grouped(batch)
        try:
            replies = self.changes.run_many([self.changes.argv(op, bid, *(o.jid for o in outcomes))
                                             for op, bid, outcomes in changes])  # fmt: skip
        except redis_py.RedisError as exc:
            self._failed(exc, len(batch))
            return []
        written = [o for (_, _, outcomes), reply in zip(changes, replies, strict=True)
                   if not isinstance(reply, Exception) for o in outcomes]  # fmt: skip
        refused = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if refused is not None:
            self._failed(refused, len(batch) - len(written))
        elif self._failing_since is not None:
            log.warning("batch: job outcomes are written again, after %.1f s", time.monotonic() - self._failing_since)
            self._failing_since = None
        return written

    def _failed(self, exc: BaseException, count: int) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "batch: Redis did not take %d job outcomes (%s: %s); their jobs stay unacknowledged, retrying",
                count,
                type(exc).__name__,
                exc,
            )


def _grouped(batch: list[Outcome]) -> list[tuple[str, str, list[Outcome]]]:
    """The outcomes as changes: the successes of one batch in a row as one change (one evaluation of the batch for
    all of them, not one per job), each failure or death alone."""
    changes: list[tuple[str, str, list[Outcome]]] = []
    for outcome in batch:
        last = changes[-1] if changes else None
        if last is not None and outcome.op == "succeeded" and last[0] == "succeeded" and last[1] == outcome.bid:
            last[2].append(outcome)
        else:
            changes.append((outcome.op, outcome.bid, [outcome]))
    return changes
