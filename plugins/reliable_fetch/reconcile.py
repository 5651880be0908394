"""The reconciliation of a reliable fetcher's working lists with its ledger, after a reply may have been lost.

Redis may run a command (a fetch: jobs move into the working list, and into the AOF; a trim; a requeue) and then
lose its reply with the connection: Redis killed or stopped mid-call, a connection cut. Jobs a fetch moved would
sit in the working list of a live worker that never heard of them, and the ledger no longer knows the list's
order. So after such a command (the ledger is ``unsure``), the next fetch first compares the working lists with the
ledger by string, as the acknowledgements did before they went by count: each entry is a running job this fetcher
holds (kept), a finished one (removed), or one no one holds (put back at the fetch end of its queue, as a requeue
does); identical strings are counted. The ledger then holds the kept entries in their order, and trims by count
again.

It cannot requeue a job a thread is running, or drop one not finished:
- the leader reconciles, before its own fetch, holding ``Ledger.writing``: no other command adds to the lists
  or takes from them meanwhile;
- a job is marked finished in the ledger before it leaves a running thread, and a requeue that may have failed
  leaves the ledger first (``Ledger.forget``): what is running is in the ledger as running;
- the requeue itself (``scripts.REQUEUE``) moves an entry only if it is still listed.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import kiq
import kiq.ext

from .recovery import put_back

if TYPE_CHECKING:
    from .fetch import ReliableFetch

log = logging.getLogger("kiq.reliable_fetch")


def reconcile(fetch: ReliableFetch) -> int:
    """Put back what the working lists of ``fetch`` hold and no one of this process knows about, remove the
    finished; returns how many went back. Called by the fetcher's leader only, before it fetches (or by its close)."""
    ledger = fetch.ledger
    job_lists = list(dict.fromkeys(fetch.lists.values()))  # one but in the queue layout (one per queue)
    keys = [job_list.key(fetch.keys) for job_list in job_lists]
    requeued = dead = 0
    with ledger.writing:
        listed = kiq.ext.run_pipeline(fetch.redis, [("LRANGE", key, 0, -1) for key in keys])  # newest first
        for job_list, key, jobs in zip(job_lists, keys, listed, strict=True):
            running, finished = ledger.known(key)
            oldest_first = jobs[::-1]
            done: list[str] = []
            stranded: list[str] = []
            for job in oldest_first:
                if running[job] > 0:
                    running[job] -= 1
                elif finished[job] > 0:
                    finished[job] -= 1
                    done.append(job)
                else:
                    stranded.append(job)
            if done:
                kiq.ext.run_pipeline(fetch.redis, [("LREM", key, -1, job) for job in done])
            if stranded:
                # newest first, as put_back takes them: the oldest runs first
                moved, killed = put_back(fetch.config, job_list, count_interruption=False, jobs=stranded[::-1])
                requeued, dead = requeued + moved, dead + killed
            # each LREM -1 took the oldest equal entry: what is left is the list less the first ones of each payload
            gone = Counter(done)
            gone.update(stranded)
            kept = []
            for job in oldest_first:
                if gone[job] > 0:
                    gone[job] -= 1
                else:
                    kept.append(job)
            ledger.rebuild(key, kept)
        ledger.unsure = False
    if requeued + dead:
        log.warning(
            "reliable fetch: %d job(s) a lost Redis reply left in %s went back to their queues (%d unrunnable, dead)",
            requeued + dead,
            fetch.working,
            dead,
        )
    return requeued + dead
