"""The acknowledgements of one reliable fetcher: a finished job leaves its working list (``LREM``) within
``ACK_DELAY`` plus a round trip, whether the worker is busy or idle.

Under load the next fetch carries them (the fetch script removes them before it moves new jobs: one round trip
for both, as before). A sender thread, woken by the first acknowledgement after a quiet spell, sends whatever is
still pending ``ACK_DELAY`` later in one pipelined round trip, so a worker that goes idle (its fetch blocked in
``BLMOVE``, or every thread on a long job) does not keep a finished job listed, where a crash would run it again
and count it against the interrupt cap. The delay costs nothing on the busy path (fetches take the acks first, and
the thread wakes at most once per delay); a shorter one would race the fetches for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import kiq
import kiq.ext

log = logging.getLogger("kiq.reliable_fetch")

ACK_DELAY = 0.01  # seconds a finished job's acknowledgement waits for a fetch to carry it before it is sent alone
RETRY_BACKOFF = (0.05, 1.0)  # Redis refused the acknowledgements: try again after this, doubling up to the second


class PendingAcks:
    """Finished jobs whose ``LREM`` has not reached Redis yet, by working list (a fetcher has one per queue in the
    queue layout, else one), and the thread that sends them if no fetch does."""

    def __init__(self, redis: Any, working_keys: Iterable[str], delay: float = ACK_DELAY, name: str = "") -> None:
        self.redis = redis
        self.name = name
        self.delay = delay
        # appended by the job threads without a lock (the hand-off engine's lock is busy enough), taken by whoever
        # sends them next: a fetch, the sender thread, a heartbeat or the close; one deque per list, all made here
        self._jobs: dict[str, deque[str]] = {key: deque() for key in working_keys}
        self._due = threading.Event()
        # held while acknowledgements are taken and sent by anyone but a fetch (and by a reconciliation, which must
        # see every finished job either pending or gone from the list: inflight.py)
        self.sending = threading.Lock()
        self._stopped = False
        self._sender: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def add(self, working_key: str, job: str) -> None:
        self._jobs[working_key].append(job)
        if self._sender is None:
            self._start()
        # set already: the sender's next pass takes this one too (it clears the flag before it takes the acks)
        if not self._due.is_set():
            self._due.set()  # a lock and a notify: skipped on the busy path, where it is almost always set

    def take(self, working_key: str) -> list[str]:
        """The pending acknowledgements of a list, taken: a fetch (without ``sending``) and the sender may take at
        once; each ``popleft`` is atomic, so every job is taken by exactly one of them."""
        jobs = self._jobs[working_key]
        taken: list[str] = []
        for _ in range(len(jobs)):  # one appended meanwhile stays for the next taker
            try:
                taken.append(jobs.popleft())
            except IndexError:  # the other taker emptied it first
                break
        return taken

    def take_all(self) -> dict[str, list[str]]:
        return {key: jobs for key in self._jobs if (jobs := self.take(key))}

    def pending(self) -> list[tuple[str, str]]:
        """(working list, job) of every acknowledgement not sent yet."""
        # list(deque): one C call under the GIL, appends cannot interleave
        return [(key, job) for key, jobs in self._jobs.items() for job in list(jobs)]

    def restore(self, working_key: str, jobs: list[str]) -> None:
        """Give back acknowledgements that could not be sent (an ``LREM`` of a job already gone is a no-op)."""
        self._jobs[working_key].extendleft(reversed(jobs))

    def send(self, jobs: dict[str, list[str]]) -> None:
        """One round trip for all of ``jobs`` (by working list); on an error they are pending again and the error
        is raised."""
        if not jobs:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)  # on a cluster, one per node the lists are on
            for key, listed in jobs.items():
                for job in listed:
                    pipe.lrem(key, -1, job)
            pipe.execute()
        except BaseException:
            for key, listed in jobs.items():
                self.restore(key, listed)
            raise

    def flush(self) -> None:
        with self.sending:
            self.send(self.take_all())

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
            except Exception as exc:  # the sender outlives any error; the jobs stay pending
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
