"""Per-job time limits: ``kiq_options = {"timeout": 30}``, or the ``job_timeout`` setting for every job.

A sync job over its limit gets ``kiq.JobTimeout`` raised in its thread by a watchdog thread (one per capsule,
started by the first limited job), at its next Python instruction, as Dramatiq's TimeLimit does: a call into C (a
``time.sleep``, a blocking socket read) finishes first. An async job is cancelled at its limit. Either way the
failure goes through the retry rules with the error class ``kiq.errors.JobTimeout``.

The interruption can only land inside ``perform``: the processor disarms the limit when ``perform`` returns, and
if the watchdog fired meanwhile, it clears the pending exception and raises one itself, so no ``JobTimeout`` ever
reaches the acknowledgement or the next job.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import math
import threading
import time
from typing import Any

from ..errors import JobTimeout


def time_limit(job: dict[str, Any], default: float) -> float:
    """The job's limit in seconds (its ``timeout`` option, else ``default``); 0: none. A ``timeout`` that is not a
    positive finite number (a payload from another producer) counts as absent."""
    limit = job.get("timeout")
    if isinstance(limit, int | float) and not isinstance(limit, bool) and 0 < limit < math.inf:
        return float(limit)
    return default


def timed_out(job: dict[str, Any], limit: float) -> JobTimeout:
    return JobTimeout(f"{job.get('class')} ran past its time limit of {limit:g} s")


class Watchdog:
    """Raises ``JobTimeout`` in processor threads whose job ran past its limit.

    Who acts on a limit, the watchdog (firing) or the job's thread (ending in time), is decided by one atomic
    ``dict.setdefault`` on the limit's id: no lock is taken on the job's side once ``perform`` may have been
    interrupted, because an exception landing between a lock's acquire and its ``with`` block would leave the lock
    held forever.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._changed = threading.Condition(threading.Lock())
        self._due: list[tuple[float, int, int]] = []  # heap of (deadline, limit id, thread ident)
        self._ids = itertools.count()
        self._claims: dict[int, str] = {}  # limit id -> FIRE or ENDED, whichever came first
        self._fired: set[int] = set()  # limit ids whose exception was sent
        self._last: dict[int, int] = {}  # thread ident -> its latest limit id
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        """The calling thread's job must be done within ``seconds``; returns the limit's id for ``disarm``. (No
        interruption can be pending here: the thread's previous limit ended in ``disarm`` or in the job.)"""
        ident = threading.get_ident()
        limit_id = next(self._ids)
        with self._changed:
            previous = self._last.get(ident)
            if previous is not None:  # a JobTimeout that landed before its disarm ran left these
                self._fired.discard(previous)
            self._last[ident] = limit_id
            heapq.heappush(self._due, (time.monotonic() + seconds, limit_id, ident))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name=self.name, daemon=True)
                self._thread.start()
            self._changed.notify()
        return limit_id

    def disarm(self, limit_id: int) -> bool:
        """The job returned (or raised): True when its limit fired first. Then the exception, if it has not landed
        yet, lands here and is dropped, so the caller raises one where it belongs; it never lands after this
        returns."""
        if self._claims.setdefault(limit_id, ENDED) == ENDED:
            return False  # the watchdog will find it ended and drop it
        try:
            while limit_id not in self._fired:  # claimed by the watchdog, which is sending the exception right now
                time.sleep(0.0001)
            _run_bytecode()
        except JobTimeout:
            pass
        self._fired.discard(limit_id)
        self._claims.pop(limit_id, None)
        return True

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    _, limit_id, ident = heapq.heappop(self._due)
                    if self._claims.setdefault(limit_id, FIRE) == FIRE:
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(JobTimeout))
                        self._fired.add(limit_id)
                    else:
                        del self._claims[limit_id]  # ended in time: nobody looks at it again
                self._changed.wait(self._due[0][0] - now if self._due else None)


FIRE, ENDED = "fire", "ended"


def _run_bytecode() -> None:
    """A call and a loop: the points where Python raises an exception sent to this thread. Letting a pending one
    land is the only safe way to be rid of it: clearing it (``PyThreadState_SetAsyncExc(ident, NULL)``) leaves
    Python 3.11's interpreter-wide "exception pending" flag set with nothing to clear it, and from then on a thread
    that is profiled or traced (the profiling plugin, coverage, a debugger) loops forever at its next call."""
    for _ in range(2):
        pass
