"""The jobs a reliable fetcher knows it holds, and the reconciliation of its working list with them after a fetch
whose reply may have been lost.

Redis may run a fetch (the jobs move into the working list, and into the AOF) and then lose its reply with the
connection: Redis killed or stopped mid-call, a connection cut. Those jobs are in the working list of a live
worker that never heard of them; nothing would run them before the worker stops. So after a fetch (or a requeue)
that met a broken connection or a timeout, the next fetch first compares the working list with the jobs this
fetcher knows it holds — fetched and not yet requeued (ready or running), or acknowledged with the ``LREM`` still
pending — and puts every other entry back at the fetch end of its queue, one per missing unit (identical strings are
counted), as a requeue does.

It cannot requeue a job a thread is running, or one just finished:
- the leader reconciles, before its own fetch: no other fetch adds to the list meanwhile;
- a job leaves the known set only after it left the list (a requeue) or while the acknowledgements are not being
  sent (``PendingAcks.sending`` is held throughout), and an acknowledged job is added to the pending
  acknowledgements before it leaves the running ones, which are read first: a job moving on is counted twice at
  worst, never missed;
- the requeue itself (``scripts.REQUEUE``) moves an entry only if it is still listed.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from .recovery import put_back

if TYPE_CHECKING:
    from .fetch import ReliableFetch

log = logging.getLogger("kiq.reliable_fetch")


class InFlight:
    """The jobs of one fetcher that are fetched and not yet acknowledged or requeued (a multiset: two identical
    payloads are two units); ``unsure`` once a reply may have been lost."""

    def __init__(self) -> None:
        self._jobs: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.unsure = False

    def add(self, jobs: Iterable[str]) -> None:
        with self._lock:
            self._jobs.update(jobs)

    def discard(self, job: str) -> None:
        with self._lock:
            left = self._jobs[job] - 1
            if left > 0:
                self._jobs[job] = left
            else:
                self._jobs.pop(job, None)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return self._jobs.copy()


def reconcile(fetch: ReliableFetch) -> int:
    """Put back what the working list of ``fetch`` holds and no one of this process knows about; returns how many.
    Called by the fetcher's leader only, before it fetches."""
    with fetch.acks.sending:  # no acknowledgement is on its way to Redis meanwhile
        listed = cast(list[str], fetch.redis.lrange(fetch.working_key, 0, -1))  # newest first
        known = fetch.in_flight.snapshot()  # first: an acknowledged job is pending before it leaves this
        known.update(fetch.acks.pending())
        stranded = []
        for job in reversed(listed):  # the oldest are the ones known the longest
            if known[job] > 0:
                known[job] -= 1
            else:
                stranded.append(job)
        stranded.reverse()  # newest first, as put_back takes them: the oldest runs first
        requeued, dead = put_back(fetch.config, fetch.working_key, count_interruption=False, jobs=stranded)
    fetch.in_flight.unsure = False
    if stranded:
        log.warning(
            "reliable fetch: %d job(s) a lost Redis reply left in %s went back to their queues (%d unrunnable, dead)",
            requeued + dead,
            fetch.working_key,
            dead,
        )
    return requeued + dead
