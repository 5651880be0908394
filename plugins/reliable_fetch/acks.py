"""The acknowledgements of one reliable fetcher: a finished job leaves its working list within ``ACK_DELAY`` plus a
round trip, whether the worker is busy or idle.

A finished job is marked in the ledger (ledger.py); the finished oldest entries leave by count. Under load the next
fetch carries that trim (one round trip for both). A sender thread, woken by the first acknowledgement after a quiet
spell, sends whatever is still pending ``ACK_DELAY`` later in one pipelined round trip (the trims, and an ``LREM``
per job finished while an older one runs), so a worker that goes idle (its fetch blocked, or every thread on a long
job) does not keep a finished job listed, where a crash would run it again and count it against the interrupt cap.
The delay costs nothing on the busy path (fetches take the trims first, and the thread wakes at most once per delay);
a shorter one would race the fetches for them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import kiq
import kiq.ext

from .ledger import Entry, Ledger
from .scripts import trim_command

log = logging.getLogger("kiq.reliable_fetch")

ACK_DELAY = 0.01  # seconds a finished job's acknowledgement waits for a fetch to carry it before it is sent alone
RETRY_BACKOFF = (0.05, 1.0)  # Redis refused the acknowledgements: try again after this, doubling up to the second


def send_acks(redis: Any, ledger: Ledger) -> None:
    """Every finished job of ``ledger`` off its working lists, in one round trip (call holding ``ledger.writing``):
    per list its trim first (an ``LREM`` scans from the old end: it must not meet an entry the trim counted), then
    the jobs finished out of order. What Redis refused stays pending (the error is raised); a list not as the ledger
    says makes it unsure, and the next fetch reconciles the lists. Unsure already: nothing is sent (the
    reconciliation compares every entry)."""
    if ledger.unsure:
        return
    commands: list[Any] = []
    sent: list[tuple[str, Entry | None]] = []  # per command: (list, None for its trim or the entry of an LREM)
    for key in ledger.lists:
        count, newest = ledger.take_cut(key)
        if count:
            commands.append(trim_command(key, count, newest))
            sent.append((key, None))
        for late in ledger.late(key):
            commands.append(("LREM", key, -1, late.job))
            sent.append((key, late))
    if not commands:
        return
    try:
        replies = kiq.ext.run_pipeline(redis, commands, raise_on_error=False)
    except BaseException:
        # not sent, or sent with the replies lost: sent again later (a trim already done then finds its newest
        # entry gone, cuts nothing and makes the ledger unsure; an LREM already done finds nothing, the same)
        for key in dict.fromkeys(key for key, entry in sent if entry is None):
            ledger.restore(key)
        ledger.unsure = ledger.unsure or any(entry is not None for _, entry in sent)  # LREMs done, maybe
        raise
    refused: Exception | None = None
    for (key, entry), reply in zip(sent, replies, strict=True):
        if isinstance(reply, Exception):
            refused = refused or reply
            if entry is None:
                ledger.restore(key)  # a script refused runs nothing
            else:
                ledger.unsure = True  # a refused LREM's entry is no longer counted by a trim: compare
        elif entry is None:
            if reply < 0:
                ledger.unsure = True  # the list is not as the ledger says
            else:
                ledger.confirm(key)
        elif reply == 1:
            ledger.removed(key, entry.job, finished=True, entry=entry)
        else:
            ledger.unsure = True
    if refused is not None:
        raise refused


class AckSender:
    """The thread that sends the acknowledgements no fetch carried within ``delay``."""

    def __init__(self, redis: Any, ledger: Ledger, delay: float = ACK_DELAY, name: str = "") -> None:
        self.redis = redis
        self.ledger = ledger
        self.name = name
        self.delay = delay
        self._due = threading.Event()
        self._stopped = False
        self._sender: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def due(self) -> None:
        """A job finished: send it within ``delay`` unless a fetch carries it first."""
        if self._sender is None:
            self._start()
        # set already: the sender's next pass takes this one too (it clears the flag before it sends)
        if not self._due.is_set():
            self._due.set()  # a lock and a notify: skipped on the busy path, where it is almost always set

    def flush(self) -> None:
        with self.ledger.writing:
            send_acks(self.redis, self.ledger)

    def stop(self, timeout: float = 2.0) -> None:
        """The sender thread ends (the caller sends what is left)."""
        self._stopped = True
        self._due.set()
        if self._sender is not None and self._sender is not threading.current_thread():
            self._sender.join(timeout)

    def _start(self) -> None:
        with self._start_lock:
            if self._sender is None and not self._stopped:
                name = f"kiq-acks-{self.name}"
                self._sender = threading.Thread(target=self._run, name=name, daemon=True)
                self._sender.start()

    def _run(self) -> None:
        backoff = kiq.ext.Backoff(*RETRY_BACKOFF)
        failing: BaseException | None = None
        while True:
            self._due.wait()
            if self._stopped:
                return
            time.sleep(self.delay)  # a fetch under way or about to start carries them in its own round trip
            self._due.clear()  # an acknowledgement added from here on sets it again: the next pass sends it
            try:
                self.flush()
            except Exception as exc:  # the sender outlives any error; the jobs stay listed, the fetch reconciles
                if failing is None:
                    # an unreachable Redis is the worker's outage, logged once by its fetch: not a line more here
                    level = logging.DEBUG if isinstance(exc, kiq.ext.UNREACHABLE) else logging.WARNING
                    log.log(level, "reliable fetch could not send acknowledgements (%s); retrying until Redis takes "
                            "them", exc)  # fmt: skip
                failing = exc
                self._due.set()
                time.sleep(backoff.next())
                continue
            if failing is not None:
                level = logging.DEBUG if isinstance(failing, kiq.ext.UNREACHABLE) else logging.WARNING
                log.log(level, "reliable fetch: acknowledgements are reaching Redis again")
                failing = None
                backoff.reset()
