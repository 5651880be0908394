"""The reliable fetcher's ledger: the order of its working lists, so that finished jobs leave them by count.

While a process lives it is the only writer of its working lists: its fetches push each job at the new end
(``LPUSH``, ``BLMOVE ... LEFT``) in the order their replies give, and jobs leave only through it (an
acknowledgement, a requeue, a put-back), or through recovery once it is dead. So it keeps each list's entries in
order, oldest first, and marks the finished ones: the finished oldest run leaves with one ``LTRIM`` by count (sent
with the next fetch, or by the acknowledgement sender), and no job string goes into Lua to be compared. The exact
comparison (``LREM`` of the job) stays where the order does not help or is unknown: a job finished while an older
one still runs, a requeue, and the reconciliation after a reply may have been lost (``unsure``: reconcile.py).

Identical payloads are interchangeable entries: ``LREM key -1 job`` takes the oldest equal entry, whichever unit it
stood for, so the ledger keeps how many entries of a payload are finished and running, not which unit is which.

Every command that takes entries off a working list is sent holding ``writing`` (the fetch that carries a trim,
the sender, a requeue, a reconciliation), with the trims still pending first: an ``LREM`` scans from the old end,
so it must never meet an entry that a trim already counted. A trim also names the newest entry it cuts, which the
script checks (scripts.CUT): if the list is not what the ledger says (recovered while this process stalled past its
liveness TTL, then refilled), nothing is cut and the lists are reconciled by comparing strings.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable


class Entry:
    """One job in a working list, as the ledger sees it."""

    __slots__ = ("done", "job", "removing")

    def __init__(self, job: str) -> None:
        self.job = job
        self.done = False
        self.removing = False  # finished out of order, its LREM on its way: a trim must not count it


class ListLedger:
    """One working list: its entries oldest first, and the finished oldest ones cut from them."""

    __slots__ = ("cut", "entries", "finished_meanwhile", "late", "sending")

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()  # still listed, oldest first (running, or finished out of order)
        self.cut: list[str] = []  # the finished oldest entries, in order, whose trim is not sent yet
        self.sending: list[str] = []  # a trim sent and not confirmed (a reconciliation counts them as finished)
        self.late = 0  # finished entries still in ``entries`` (an older one runs): each leaves by LREM
        self.finished_meanwhile: list[str] | None = None  # during a reconciliation: jobs finished since ``known``


class Ledger:
    """The working lists of one fetcher, by key."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.lists = {key: ListLedger() for key in keys}
        self.writing = threading.Lock()  # held across every command that takes entries off a working list
        self._lock = threading.Lock()  # held for the bookkeeping only, never across a round trip
        self.unsure = False  # a reply may have been lost: reconcile the lists by comparing strings

    def fetched(self, jobs: Iterable[tuple[str, str]]) -> None:
        """(working list, job) pairs a fetch moved, in the order it pushed them."""
        with self._lock:
            lists = self.lists
            for key, job in jobs:
                lists[key].entries.append(Entry(job))

    def finish(self, key: str, job: str) -> bool:
        """A job of list ``key`` is finished; True when it made something to send."""
        with self._lock:
            listed = self.lists[key]
            if listed.finished_meanwhile is not None:
                listed.finished_meanwhile.append(job)
            for entry in listed.entries:
                if not entry.done and entry.job == job:  # a unit's own string: ``is`` answers first
                    entry.done = True
                    break
            else:
                return False  # no longer listed (a reconciliation put it back)
            listed.late += 1
            _cut(listed)
            return True

    def pending(self) -> bool:
        """Anything finished not yet sent."""
        return any(listed.cut or listed.late for listed in self.lists.values())

    def take_cut(self, key: str) -> tuple[int, str]:
        """How many oldest entries of ``key`` to trim and the newest of them ("" for none), now being sent (call
        holding ``writing``; then ``confirm`` or ``restore``)."""
        with self._lock:
            listed = self.lists[key]
            cut, listed.cut = listed.cut, []
            listed.sending += cut
            return len(cut), cut[-1] if cut else ""

    def confirm(self, key: str) -> None:
        """The trim of ``key`` was done."""
        with self._lock:
            self.lists[key].sending.clear()

    def restore(self, key: str) -> None:
        """The trim of ``key`` was surely not done (Redis refused the command before it ran)."""
        with self._lock:
            listed = self.lists[key]
            listed.cut[:0] = listed.sending
            listed.sending.clear()

    def late_apart(self, key: str) -> list[Entry]:
        """``late`` but for the jobs equal to one a trim still counts (an LREM sent before that trim must not meet
        it: those wait for the acknowledgement sender, which trims first)."""
        with self._lock:
            listed = self.lists[key]
            if not listed.late:
                return []
            counted = set(listed.cut)
            return _removing([entry for entry in listed.entries if entry.done and entry.job not in counted])

    def late(self, key: str) -> list[Entry]:
        """The finished entries of ``key`` that an older running one keeps listed, now on their way out: each leaves
        by LREM (call holding ``writing``; then ``removed`` for each, or the ledger is made unsure)."""
        with self._lock:
            listed = self.lists[key]
            return _removing([entry for entry in listed.entries if entry.done]) if listed.late else []

    def removed(self, key: str, job: str, finished: bool, entry: Entry | None = None) -> None:
        """``LREM key -1 job`` (alone or in a requeue) removed one entry: the oldest equal one, finished or not.
        One entry of that payload fewer: a finished one (``entry``, from ``late``) or a running one (a requeue)."""
        with self._lock:
            listed = self.lists[key]
            if entry is not None and not any(listed_entry is entry for listed_entry in listed.entries):
                return  # the older ones finished meanwhile: the cut left it out, as it was leaving
            equal = [entry for entry in listed.entries if entry.job == job]
            if not equal or (finished and not any(entry.done for entry in equal)):
                self.unsure = True
                return
            oldest = equal[0]
            listed.entries.remove(oldest)  # by identity: Entry has no __eq__
            if oldest.done != finished:  # the other state lost one: one of the rest takes its place
                swapped = next((entry for entry in equal[1:] if entry.done == finished), None)
                if swapped is None:
                    self.unsure = True
                else:
                    swapped.done = oldest.done
            listed.late = sum(entry.done for entry in listed.entries)
            _cut(listed)

    def forget(self, key: str, job: str) -> None:
        """A running job leaves the ledger while it may still be listed (its requeue failed): a reconciliation
        then puts it back as a job no one holds."""
        with self._lock:
            listed = self.lists[key]
            entry = next((entry for entry in listed.entries if not entry.done and entry.job == job), None)
            if entry is not None:
                listed.entries.remove(entry)
            self.unsure = True

    def known(self, key: str) -> tuple[Counter[str], Counter[str]]:
        """(running, finished) entries of ``key`` by payload, for a reconciliation (holding ``writing``)."""
        with self._lock:
            listed = self.lists[key]
            listed.finished_meanwhile = []
            running = Counter(entry.job for entry in listed.entries if not entry.done)
            finished = Counter(entry.job for entry in listed.entries if entry.done)
            finished.update(listed.cut)
            finished.update(listed.sending)
            return running, finished

    def rebuild(self, key: str, entries: list[str]) -> None:
        """After a reconciliation: ``key`` holds exactly ``entries`` (oldest first), running but for the jobs that
        finished since ``known``."""
        with self._lock:
            listed = self.lists[key]
            listed.entries = deque(Entry(job) for job in entries)
            listed.cut, listed.sending, listed.late = [], [], 0
            for job in listed.finished_meanwhile or ():
                entry = next((entry for entry in listed.entries if not entry.done and entry.job == job), None)
                if entry is not None:
                    entry.done = True
                    listed.late += 1
            listed.finished_meanwhile = None
            _cut(listed)


def _cut(listed: ListLedger) -> None:
    """Move the finished oldest entries to ``cut`` (called with the lock held)."""
    entries = listed.entries
    while entries and entries[0].done:
        entry = entries.popleft()
        listed.late -= 1
        if not entry.removing:  # one on its way out by LREM is not the trim's to count
            listed.cut.append(entry.job)


def _removing(entries: list[Entry]) -> list[Entry]:
    for entry in entries:
        entry.removing = True
    return entries
