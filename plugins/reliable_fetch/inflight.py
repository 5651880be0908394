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
from typing import TYPE_CHECKING

import kiq
import kiq.ext

from .recovery import put_back

if TYPE_CHECKING:
    from .fetch import ReliableFetch

log = logging.getLogger("kiq.reliable_fetch")
Listed = tuple[str, str]  # (the key of the working list, the job)


class InFlight:
    """The jobs of one fetcher that are fetched and not yet acknowledged or requeued, as (working list, job) (a
    multiset: two identical payloads are two units); ``unsure`` once a reply may have been lost."""

    def __init__(self) -> None:
        self._jobs: Counter[Listed] = Counter()
        self._lock = threading.Lock()
        self.unsure = False

    def add(self, jobs: Iterable[Listed]) -> None:
        with self._lock:
            self._jobs.update(jobs)

    def discard(self, job: Listed) -> None:
        with self._lock:
            left = self._jobs[job] - 1
            if left > 0:
                self._jobs[job] = left
            else:
                self._jobs.pop(job, None)

    def snapshot(self) -> Counter[Listed]:
        with self._lock:
            return self._jobs.copy()


def reconcile(fetch: ReliableFetch) -> int:
    """Put back what the working lists of ``fetch`` hold and no one of this process knows about; returns how many.
    Called by the fetcher's leader only, before it fetches."""
    job_lists = list(dict.fromkeys(fetch.lists.values()))  # one but in the queue layout (one per queue)
    keys = [job_list.key(fetch.keys) for job_list in job_lists]
    with fetch.acks.sending:  # no acknowledgement is on its way to Redis meanwhile
        listed = kiq.ext.run_pipeline(fetch.redis, [("LRANGE", key, 0, -1) for key in keys])  # newest first
        known = fetch.in_flight.snapshot()  # first: an acknowledged job is pending before it leaves this
        known.update(fetch.acks.pending())
        requeued = dead = 0
        for job_list, key, jobs in zip(job_lists, keys, listed, strict=True):
            stranded = []
            for job in reversed(jobs):  # the oldest are the ones known the longest
                if known[key, job] > 0:
                    known[key, job] -= 1
                else:
                    stranded.append(job)
            stranded.reverse()  # newest first, as put_back takes them: the oldest runs first
            if stranded:
                moved, killed = put_back(fetch.config, job_list, count_interruption=False, jobs=stranded)
                requeued, dead = requeued + moved, dead + killed
    fetch.in_flight.unsure = False
    if requeued + dead:
        log.warning(
            "reliable fetch: %d job(s) a lost Redis reply left in %s went back to their queues (%d unrunnable, dead)",
            requeued + dead,
            fetch.working,
            dead,
        )
    return requeued + dead
