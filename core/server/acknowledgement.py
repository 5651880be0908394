"""What a plugin can say about the job running in its thread: hold its acknowledgement until something outside the
job is durable (``kiq.ext.hold_acknowledgement``), or report that it failed although it returned
(``kiq.ext.report_failure``).

The processor acknowledges a job when it finished or its failure was recorded. A plugin that must make its own
record of the outcome durable first (the tracking plugin's status row) holds the acknowledgement and releases it
once that record is written, from any thread. Until then the job stays in Redis (with reliable fetch, in the
working list), so a crash in between runs the job again instead of losing the record: at least once.

A job that returned normally can still have failed for its application: the tracking plugin turns its
``TaskFailure`` into a ``failed`` status without a retry. The plugin reports that failure so the worker's log line and
failure count tell the truth, as Sidekiq's would for a job that raised.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

Acknowledge = Callable[[], None]
T = TypeVar("T")


class _Holds:
    """The holds on one job's acknowledgement; it is sent when the job ended and every hold is released."""

    __slots__ = ("ack", "count", "ended", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.ended = False
        self.ack: Acknowledge | None = None

    def add(self) -> Acknowledge:
        with self.lock:
            self.count += 1
        released = False  # under the lock: a second call must not release another holder's share

        def release() -> None:
            nonlocal released
            with self.lock:
                if released:
                    return
                released = True
                self.count -= 1
                ack = self.ack if self.ended and self.count == 0 else None
            if ack is not None:
                ack()

        return release

    def end(self, ack: Acknowledge | None) -> None:
        with self.lock:
            self.ended, self.ack = True, ack
            due = ack if self.count == 0 else None
        if due is not None:
            due()


class JobAcknowledgement:
    """One per processor, about the job it is running now: the holds on its acknowledgement (None until a plugin asks
    for one), and the failure a plugin reported for it (None: none)."""

    __slots__ = ("failure", "holds", "running")

    def __init__(self) -> None:
        self.running = False
        self.holds: _Holds | None = None
        self.failure: str | None = None

    def begin(self) -> None:
        self.running = True
        self.failure = None

    def end(self, acknowledge: Callable[[T], None] | None, unit: T) -> None:
        """The job ended: ``acknowledge(unit)`` now, or once every hold is released; None: it must not be
        acknowledged (requeued by a stop, or an internal error), and releasing its holds does nothing."""
        holds, self.holds, self.running = self.holds, None, False
        if holds is None:  # the usual case: nothing to allocate
            if acknowledge is not None:
                acknowledge(unit)
        else:
            holds.end(None if acknowledge is None else functools.partial(acknowledge, unit))

    def hold(self) -> Acknowledge:
        if self.holds is None:
            self.holds = _Holds()
        return self.holds.add()


current: ContextVar[JobAcknowledgement | None] = ContextVar("kiq_acknowledgement", default=None)


def hold_acknowledgement() -> Acknowledge | None:
    """Keep the job being run now from being acknowledged until the returned ``release()`` is called (once, from
    any thread). None outside a running job (e.g. in a client, or in a death hook run by orphan recovery).

    With reliable fetch a worker killed before ``release()`` leaves the job in Redis, and it runs again; with
    basic fetch the job left Redis when it was fetched, so nothing changes.
    """
    acknowledgement = current.get()
    if acknowledgement is None or not acknowledgement.running:
        return None
    return acknowledgement.hold()


def report_failure(reason: str) -> bool:
    """Report that the job running in this thread failed although it returns normally (a business failure that a
    plugin handled, such as tracking's ``TaskFailure``). The worker logs its end as ``fail: <reason>`` and counts it
    as failed in the stats, as Sidekiq counts a job that raised; it is still acknowledged, not retried, and not an
    error for the ``kiq_error`` hooks. The last reason reported wins. False outside a running job: nothing to report.
    """
    acknowledgement = current.get()
    if acknowledgement is None or not acknowledgement.running:
        return False
    acknowledgement.failure = str(reason)
    return True
