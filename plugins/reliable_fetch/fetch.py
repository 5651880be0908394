"""ReliableFetch: jobs move atomically from ``queue:<q>`` into this process's working list, and leave it only
when acknowledged, requeued, or recovered after the process died.

On a cluster with ``slots = "queue"`` each queue has its own working list beside it (keys.py): a fetch walks the
capsule's queue order slot group by slot group, one script per group until one has jobs (as the basic fetcher
does), so strict and weighted orders hold across slots; a unit knows its queue, hence its list.

Speed without giving up the guarantee:
- one Lua call, on the fetching thread's own connection, moves one job for each idle thread (at most
  ``reliable_batch_size``), handed out by ``kiq.ext.BatchFetch``: a process never holds more jobs than it has
  idle threads, so it does not sit on jobs that idle processes could run;
- a finished job leaves by count, not by comparing strings: this process is its working lists' only writer, so
  its ledger (ledger.py) knows their order, and the finished oldest entries leave with one ``LTRIM`` that rides
  along with the next fetch under load (one round trip for both); whatever no fetch carried within ``ACK_DELAY``
  (an idle worker blocked in ``BLMOVE``, every thread on a long job) is sent by the acknowledgement thread (acks.py),
  so a finished job leaves the working list within ``ACK_DELAY`` plus a round trip, and only a kill in that
  instant can run it again (and count it as interrupted);
- a command whose reply may have been lost (a broken connection, a timeout: Redis killed mid-call) makes the next
  fetch reconcile the working lists with the ledger by comparing strings (reconcile.py), so a job Redis moved for
  it is not stranded there until the worker stops, and the ledger knows the order again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from redis import exceptions as redis_errors

import kiq
import kiq.ext

from . import scripts
from .acks import AckSender
from .keys import JobList, queue_list_name, working_key
from .ledger import Entry, Ledger
from .liveness import Liveness
from .reconcile import reconcile
from .recovery import put_back, recover_orphans
from .waiting import Moved, ParkedMoves

log = logging.getLogger("kiq.reliable_fetch")

BLOCK_SECONDS = 1.0  # the longest retrieve_work waits for a job, so that a stop is prompt
IDLE_BACKOFF = (0.05, 0.5)  # with several queues all empty: sleep, doubling from the first to the second value


@dataclass(eq=False, slots=True)
class ReliableUnit:
    """One fetched job; it stays in the working list until ``acknowledge()`` or ``requeue()``."""

    fetcher: ReliableFetch = field(repr=False)
    queue_name: str
    job: str
    working_key: str = field(repr=False)  # the list it waits in: its queue's in the queue layout

    def acknowledge(self) -> None:
        self.fetcher.acknowledge(self)

    def requeue(self) -> None:
        self.fetcher.requeue(self)


class ReliableFetch(kiq.ext.BatchFetch):
    """The fetcher of one capsule in one process (``fetch = "reliable"``), on ``kiq.ext.BatchFetch``'s public seam
    only: ``pop`` moves the jobs into the working lists, ``retrieve_work`` wraps ``next_job()``."""

    block_seconds = BLOCK_SECONDS

    def __init__(self, capsule: kiq.ext.Capsule, liveness: Liveness | None = None) -> None:
        if not capsule.queues:
            raise kiq.ConfigError(f"capsule {capsule.name!r} has no queues to fetch from")
        config = capsule.config
        super().__init__(config.redis)
        self.config = config
        self.redis = config.redis
        self.identity = capsule.identity
        self.keys = kiq.ext.keyspace(self.redis)
        self.working = working_key(capsule.identity, capsule.name)  # the name of its working lists
        # queue name -> the list its jobs wait in (one for all but in the queue layout) and that list's key
        # (standalone, several queues: one list per queue, as each has a move parked on it: waiting.py)
        per_queue = not self.keys.cluster and len(capsule.queues) > 1
        self.lists = {
            name: JobList(queue_list_name(self.working, name), None)
            if per_queue
            else JobList.beside(self.keys, self.working, name)
            for name, _ in capsule.queues
        }
        self._working_keys = {name: job_list.key(self.keys) for name, job_list in self.lists.items()}
        self.order = capsule.queue_order()  # the paused queues left out
        self.source = capsule.job_source()  # a plugin's (kiq_job_source, e.g. job groups), or None: the queues' lists
        self._batch_size: int = config.get("reliable_batch_size")  # a ConfigError without the plugin
        # jobs moved beyond the idle threads while the queues keep a backlog (kiq.ext.BatchFetch.prefetch); not from
        # a plugin's job source, whose moves may take a slot (job groups) a prefetched job would hold unused
        self.prefetch = config.get("reliable_prefetch") if self.source is None else 0
        self.liveness = liveness or Liveness(config, capsule.identity)
        # the order of the working lists and which of their jobs are finished (a job leaves by count)
        self.ledger = Ledger(dict.fromkeys(self._working_keys.values()))
        self.acks = AckSender(self.redis, self.ledger, name=capsule.name)
        self._acks_at_once = False  # no fetch is coming to carry them (quiet, closing)
        self._idle = kiq.ext.Backoff(*IDLE_BACKOFF)
        self._out_of_memory = False  # Redis refused BLMOVE at maxmemory: poll instead of blocking
        # the last fetch left the queues empty (a job came by blocking with none behind it, or a batch took fewer
        # than asked): the next fetch blocks at once, with no empty script before
        self._drained = False
        self._waits = None if self.keys.cluster else ParkedMoves(self.redis, BLOCK_SECONDS)
        self.liveness.join()

    # -- the fetcher seam ------------------------------------------------------------------------------
    def retrieve_work(self) -> ReliableUnit | None:
        """The next job, or None after about ``BLOCK_SECONDS`` without one (or once closed)."""
        fetched = self.next_job()
        return None if fetched is None else self._unit(*fetched)

    def acknowledge(self, unit: ReliableUnit) -> None:
        # sent with the next fetch, or by the acknowledgement thread
        if self.ledger.finish(unit.working_key, unit.job):
            if self._acks_at_once:  # no fetch is coming: send it now (with any other still waiting)
                self.flush_acks()
            else:
                self.acks.due()

    def requeue(self, unit: ReliableUnit) -> None:
        """Back to the fetch end of its queue (it runs next), if it is still ours."""
        self._requeue([unit])

    def bulk_requeue(self, units: Sequence[kiq.ext.UnitOfWork]) -> None:
        """Give the in-flight ``units`` back to the fetch end of their queues (a stop ran out of time)."""
        if not units:
            return
        try:
            self._requeue([cast(ReliableUnit, unit) for unit in units])
        except redis_errors.RedisError as exc:
            log.error("could not requeue %d running jobs (%s); they stay in %s", len(units), exc, self.working)

    def close(self, timeout: float = 3 * BLOCK_SECONDS) -> None:
        """Stop for good: pending acknowledgements are sent, any job still listed goes back to its queue, and the
        working list (and, with the last capsule's fetcher, the liveness key) are gone afterwards."""
        if self.closed:
            return
        self._acks_at_once = True
        # waiting threads return None now; a fetch under way is let finish (bounded: a thread killed mid-fetch
        # leaves its jobs in the working list, which the put_back below returns)
        super().close(timeout)
        self.acks.stop()
        last = self.liveness.leave()
        try:
            if self._waits is not None:
                self._waits.close()  # what a parked move brought is listed: put back below
            try:
                self.flush_acks()
            finally:
                if self.ledger.unsure:  # the finished ones leave, by comparing strings
                    reconcile(self)
            # anything still listed was handed to a thread and not finished: better twice than never
            for job_list in dict.fromkeys(self.lists.values()):
                put_back(self.config, job_list, count_interruption=False)
            if last:
                self.redis.delete(self.liveness.key)
        except redis_errors.RedisError as exc:
            log.error(
                "could not give back the jobs of %s (%s); they stay in Redis and another process recovers "
                "them once this one's liveness key expires",
                self.working,
                exc,
            )

    # -- the rest of its life, driven by the worker ----------------------------------------------------
    def heartbeat(self) -> None:
        """Keep this process alive in Redis, send any acknowledgement still pending, and recover the jobs of
        dead processes (one process of the fleet per ``reliable_recovery_interval``, under a lease)."""
        if self.closed:
            return
        self.liveness.refresh()
        self.flush_acks()
        recover_orphans(self.config, self.identity)

    def quiet(self) -> None:
        """No more fetches will come to carry acknowledgements: send them at once from now on, and give the
        prefetched jobs no thread took back to the fetch end of their queues, for other processes. With Redis
        unreachable both stay pending (the sender retries the acknowledgements; ``close`` puts back what is still
        listed, and recovery does if the process dies): a stop must go on."""
        self._acks_at_once = True
        try:
            self.flush_acks()
            if unstarted := self.take_unstarted():
                self._requeue([self._unit(queue, job) for queue, job in unstarted])
        except (redis_errors.RedisError, OSError) as exc:
            log.debug("acknowledgements or prefetched jobs left listed at quiet: %s", exc)

    def flush_acks(self) -> None:
        self.acks.flush()

    # -- the round trip kiq.ext.BatchFetch hands out -------------------------------------------------------
    def pop(self, wanted: int, block: float) -> list[kiq.ext.Fetched]:
        """The leader's fetch: first the reconciliation a lost reply calls for, then the jobs, each one in the ledger
        before any thread can take it."""
        if self._waits is not None and self._waits.moved_to_new_master():
            self.ledger.unsure = True  # the new master's working lists are as the promotion left them: compare
        if self.ledger.unsure:
            reconcile(self)
        broken = self.connection.broken
        try:
            fetched = self._move(wanted, block)
        except kiq.ext.UNREACHABLE:
            self.ledger.unsure = True
            raise
        if self.connection.broken != broken:  # sent again on a new connection: the first may have moved jobs
            self.ledger.unsure = True
        if fetched:
            working = self._working_keys
            self.ledger.fetched((working[queue], job) for queue, job in fetched)
        return fetched

    # -- internals -------------------------------------------------------------------------------------
    def _unit(self, queue: str, job: str) -> ReliableUnit:
        """A fetched job of ``queue``, as listed in that queue's working list."""
        return ReliableUnit(self, queue, job, self._working_keys[queue])

    def _move(self, wanted: int, block: float) -> list[kiq.ext.Fetched]:
        order = self.order.keys()
        if order:
            self.liveness.refresh_if_due()  # before any job can enter a working list (Liveness)
        if self.source is not None:
            return self._move_from_source(order, min(wanted, self._batch_size), block)
        waits = self._waits
        if waits is not None:
            if self._drained and block >= self.min_block and not self._out_of_memory:
                return self._wait(order, block)  # light load: a job came by blocking, none behind it: block again
            try:  # before a script: no move under way into the lists it pushes to
                if jobs := self._landed(waits.end()):
                    return jobs
            except BaseException:
                self.ledger.unsure = True  # a move's reply may be lost
                raise
        with self.ledger.writing:  # the fetch may carry a trim
            asked = min(wanted, self._batch_size + self.prefetch)
            for group in self.order.groups(order):  # one script per slot (a single group but in the queue layout)
                reply = self._move_from(group, asked)
                if reply:
                    self._idle.reset()
                    self._out_of_memory = False  # try blocking again the next time the queue is empty
                    jobs = kiq.ext.popped_jobs(reply, self.keys)
                    self._drained = len(jobs) < asked  # fewer than asked: the queues are empty now
                    return jobs
        if block < self.min_block:
            return []
        if waits is not None and order and not self._out_of_memory:
            return self._wait(order, block)
        queues = self.order.distinct
        if len(queues) == 1 and not self._out_of_memory:
            # a single queue on a cluster: block inside Redis (there is no other queue this could starve)
            name = self.keys.queue_name(queues[0])
            timeout = round(min(block, BLOCK_SECONDS), 3)
            try:
                job: str | None = self.connection.command(
                    "BLMOVE", queues[0], self._working_keys[name], "RIGHT", "LEFT", timeout
                )
            except redis_errors.OutOfMemoryError:
                self._refused_at_maxmemory()
                return []
            return [(name, job)] if job is not None else []
        # several queues on a cluster (or Redis out of memory): back off briefly
        time.sleep(min(self._idle.next(), block))
        return []

    def _move_from_source(self, order: list[str], wanted: int, block: float) -> list[kiq.ext.Fetched]:
        """The jobs of a plugin's ``JobSource``, which moves them into the working lists in its own script; the
        acknowledgements pending go first, on their own."""
        assert self.source is not None
        self.flush_acks()
        for group in self.order.groups(order):
            names = [self.keys.queue_name(key) for key in group]
            jobs = self.source.pop(self.connection, names, wanted, [self._working_keys[name] for name in names])
            if jobs:
                return jobs
        if not order:  # every queue is paused: wait as a fetch would
            time.sleep(max(0.0, min(block, BLOCK_SECONDS)))
            return []
        if block < self.min_block:
            return []
        names = [self.keys.queue_name(key) for key in self.order.groups(order)[0]]
        timeout = round(min(block, BLOCK_SECONDS), 3)
        return self.source.block(self.connection, names, timeout, [self._working_keys[name] for name in names])

    def _wait(self, order: list[str], block: float) -> list[kiq.ext.Fetched]:
        """Block on every queue of ``order`` at once (waiting.py) for up to ``block`` s."""
        waits = self._waits
        assert waits is not None
        moves = [(key, self._working_keys[self.keys.queue_name(key)]) for key in order]
        deadline = time.monotonic() + min(block, BLOCK_SECONDS)
        try:
            while (left := deadline - time.monotonic()) >= self.min_block:
                if jobs := self._landed(waits.wait(moves, left)):
                    return jobs
            jobs = self._landed(waits.end())  # an empty wait leaves no move parked
        except redis_errors.OutOfMemoryError:
            self.ledger.unsure = True  # replies read with it may be lost: compare
            self._refused_at_maxmemory()
            return []
        except BaseException:
            self.ledger.unsure = True  # a move's reply may be lost
            raise
        self._drained = bool(jobs) and self._drained
        return jobs

    def _landed(self, landed: list[Moved]) -> list[kiq.ext.Fetched]:
        """The jobs parked moves brought; with no backlog behind them, the next fetch blocks at once."""
        jobs = [(self.keys.queue_name(moved.queue), moved.job) for moved in landed if moved.job is not None]
        if jobs:
            self._drained = not any(moved.backlog for moved in landed)
        return jobs

    def _refused_at_maxmemory(self) -> None:
        # at maxmemory Redis refuses BLMOVE up front even on an empty queue; the script still works
        log.warning("Redis is out of memory (maxmemory): polling the queue instead of blocking on it")
        self._out_of_memory = True

    def _move_from(self, group: list[str], wanted: int) -> list[str | int]:
        """One fetch script over the queues (keys) of one slot, carrying the trim of the first one's working list
        (the other lists' wait for a fetch that starts with them, or for the acknowledgement thread); its reply
        without the trim's result. Called holding ``ledger.writing``."""
        names = [self.keys.queue_name(key) for key in group]
        working = self._working_keys[names[0]]
        if late := self.ledger.late_apart(working):
            # jobs finished out of order leave before new ones come (a worker never lists more jobs than it has
            # threads, at maxmemory too): plain LREMs, in one round trip
            self._remove_late(working, late)
        count, newest = self.ledger.take_cut(working)
        try:
            keys = [key for name in names for key in (self._working_keys[name], self.keys.queue(name))]
            reply: list[str | int] = self.connection.script(scripts.FETCH.source, keys, [wanted, count, newest])
        except redis_errors.ResponseError:
            self.ledger.restore(working)  # refused before it ran (the trim is its last step)
            raise
        except BaseException:
            self.ledger.unsure = True  # the trim ran, maybe
            raise
        if reply[0] == -1:
            self.ledger.unsure = True  # the list is not as the ledger says
        elif count:
            self.ledger.confirm(working)
        return reply[1:]

    def _remove_late(self, working: str, late: list[Entry]) -> None:
        try:
            replies = self.connection.pipeline(*[("LREM", working, -1, entry.job) for entry in late])
        except BaseException:
            self.ledger.unsure = True  # some removed, maybe
            raise
        for entry, removed in zip(late, replies, strict=True):
            if removed:
                self.ledger.removed(working, entry.job, finished=True, entry=entry)
            else:
                self.ledger.unsure = True

    def _requeue(self, units: list[ReliableUnit]) -> None:
        """Give ``units`` back to the fetch end of their queues, if they are still listed (the last pushed runs
        first: the newest first), after the trims pending on their lists (an LREM must not meet an entry a trim
        counted); one round trip."""
        with self.ledger.writing:
            commands: list[Any] = []
            trims: list[str] = []
            for key in dict.fromkeys(unit.working_key for unit in units):
                count, newest = self.ledger.take_cut(key)
                if count:
                    commands.append(scripts.trim_command(key, count, newest))
                    trims.append(key)
            commands += [scripts.requeue_command(self.keys, self.lists[unit.queue_name].name, unit.queue_name,
                                                 unit.job, "front") for unit in reversed(units)]  # fmt: skip
            try:
                replies = kiq.ext.run_pipeline(self.redis, commands)
            except BaseException:
                for unit in units:  # still listed, maybe: the next fetch puts each back if so
                    self.ledger.forget(unit.working_key, unit.job)
                raise
            for key, reply in zip(trims, replies, strict=False):
                if reply < 0:
                    self.ledger.unsure = True
                else:
                    self.ledger.confirm(key)
            for unit, moved in zip(reversed(units), replies[len(trims) :], strict=True):
                if moved:
                    self.ledger.removed(unit.working_key, unit.job, finished=False)
                else:
                    self.ledger.forget(unit.working_key, unit.job)  # not listed: the ledger was wrong
