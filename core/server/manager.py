"""A Manager runs the processors of one capsule (kiq.fetcher.Capsule) and drives its fetcher's life.

The config's ``queues`` and ``concurrency`` form the ``default`` capsule. More capsules (e.g. one thread for a
queue whose jobs must not run in parallel) are declared in a ``configure_server`` callback::

    @kiq.configure_server
    def setup(config):
        config.add_capsule("serial", queues=["imports"], concurrency=1)

``quiet()`` stops fetching; ``stop(deadline)`` waits for the jobs in flight until the deadline, then requeues what
is still running and interrupts those threads (Sidekiq's ``hard_shutdown``): a job is never lost by a stop,
though it may run twice (at-least-once); ``close()`` closes the fetcher, after the shutdown hooks.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..config import DEFAULT_CAPSULE
from ..failures import TRANSIENT
from ..fetcher import Capsule
from ..keys import keyspace
from ..payload import parse_payload
from .aio import EventLoop
from .fetch import fetcher_for
from .outcomes import Outcome, OutcomeKeeper, RedisOutage
from .processor import Processor
from .runner import JobRunner, Slot
from .time_limit import Watchdog

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import UnitOfWork

log = logging.getLogger("kiq")

# seconds interrupted threads and cancelled coroutines get, all together, to unwind before the process exits
# anyway: with the requeue done at the deadline, a stop ends within ``timeout`` + this + the closing round trips
KILL_GRACE = 1.0
STOP_POLL = 0.1  # seconds between checks for a second TERM while waiting for running jobs


def capsules_for(config: Config, identity: str = "") -> list[Capsule]:
    """The default capsule (the ``queues`` and ``concurrency`` settings) and every capsule ``config.add_capsule``
    declared."""
    capsules = [Capsule(DEFAULT_CAPSULE, list(config.queues), config.concurrency, config, identity)]
    capsules += [Capsule(name, queues, n, config, identity) for name, (queues, n) in config.capsules.items()]
    return capsules


class Manager:
    """The processors of one capsule, sharing its fetcher, and its event loop for async jobs (kiq.server.aio),
    started by the first async job it meets."""

    def __init__(
        self, capsule: Capsule, outage: RedisOutage | None = None, keeper: OutcomeKeeper | None = None
    ) -> None:
        self.capsule = capsule
        self.fetcher = fetcher_for(capsule)
        self.stopping = threading.Event()
        self._hard_shutdown = threading.Lock()
        self._hard_shutdown_done = False
        self._unwind_until: float | None = None  # the monotonic end of the hard shutdown's grace, once begun
        self._loop_lock = threading.Lock()
        self.event_loop: EventLoop | None = None
        outage = outage or RedisOutage(capsule.config)
        self.keeper = keeper or OutcomeKeeper(capsule.config, outage)  # the worker's, for held job outcomes
        watchdog = Watchdog(f"kiq-{capsule.name}-watchdog")  # time limits; its thread starts with the first one
        self.processors = [
            Processor(
                capsule.config,
                self.fetcher,
                self.stopping,
                outage,
                f"kiq-{capsule.name}-{index}",
                self._run_async,
                watchdog,
                self.keeper,
            )
            for index in range(capsule.concurrency)
        ]

    def start(self) -> None:
        for processor in self.processors:
            processor.start()

    @property
    def runners(self) -> list[JobRunner]:
        """Whatever runs jobs and counts them: the processor threads, and the event loop once it runs."""
        loop = self.event_loop
        return [*self.processors, loop] if loop is not None else list(self.processors)

    def slots(self) -> list[Slot]:
        """Every job in flight (one per busy thread, one per async job): the heartbeat's ``<identity>:work``."""
        slots = [processor.slot for processor in self.processors]
        loop = self.event_loop
        return slots + loop.slots if loop is not None else slots

    def quiet(self) -> None:
        """Stop fetching; running jobs go on."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.fetcher.quiet()

    def wait(self, deadline: float, cut_short: threading.Event | None = None) -> bool:
        """Wait (monotonic ``deadline``, or until ``cut_short`` is set) for the processor threads and the async
        jobs to end; True when all did."""
        for processor in self.processors:
            while processor.thread.is_alive() and (remaining := deadline - time.monotonic()) > 0:
                if cut_short is not None and cut_short.is_set():
                    break
                processor.thread.join(min(remaining, STOP_POLL))
        loop = self.event_loop
        async_done = loop is None or loop.wait(deadline, cut_short)
        return async_done and not any(processor.thread.is_alive() for processor in self.processors)

    def stop(self, deadline: float, cut_short: threading.Event | None = None) -> None:
        """Quiet, wait for the running jobs until ``deadline`` (or ``cut_short``, a second TERM), then requeue and
        interrupt what still runs. The fetcher stays open (``close``): a plugin may still acknowledge jobs."""
        self.quiet()
        if not self.wait(deadline, cut_short):
            self.hard_shutdown()

    def close(self) -> None:
        """The event loop ends, and the fetcher stops for good (e.g. the reliable one's working list is emptied)."""
        if self.event_loop is not None:
            # what is left of the hard shutdown's grace (its coroutines had it already), not a grace of its own
            until = self._unwind_until
            self.event_loop.close(KILL_GRACE if until is None else max(0.0, until - time.monotonic()))
        self.fetcher.close()

    def hard_shutdown(self) -> None:
        """The deadline passed: requeue the jobs still running, then interrupt their threads and cancel their
        coroutines. Requeue first, because running a job twice is better than losing it."""
        with self._hard_shutdown:
            if self._hard_shutdown_done:
                return
            self._hard_shutdown_done = True
            self._unwind_until = time.monotonic() + KILL_GRACE
        busy = [processor for processor in self.processors if processor.unit is not None]
        loop = self.event_loop
        running = loop.slots if loop is not None else []
        slots = [*(processor.slot for processor in busy), *running]
        units = [unit for slot in slots if (unit := slot.unit) is not None]
        log.warning(
            "terminating %d busy threads and %d async jobs of capsule %s", len(busy), len(running), self.capsule.name
        )
        for slot in slots:  # the operator sees what hung, and for how long
            log.warning("requeued %s", describe_running(slot))
        try:
            self.fetcher.bulk_requeue(units)
        except TRANSIENT as exc:  # basic fetch: these are the jobs' only copies, held as job outcomes are
            for unit in units:
                requeue = ["RPUSH", keyspace(self.capsule.config.redis).queue(unit.queue_name), unit.job]
                self.keeper.hold(Outcome(unit.requeue, requeue, unit, _requeued), exc)
        for processor in busy:
            processor.kill()
        if loop is not None:
            loop.cancel()
        self.wait(self._unwind_until)  # give the threads a moment to unwind their finally blocks

    def _run_async(self, unit: UnitOfWork, job: dict[str, Any], job_class: type[Any]) -> bool:
        """A processor's async job, handed to the capsule's event loop (started by the first one)."""
        loop = self.event_loop
        if loop is None:
            with self._loop_lock:
                loop = self.event_loop
                if loop is None:
                    config = self.capsule.config
                    loop = EventLoop(config, f"kiq-{self.capsule.name}-loop", config.async_concurrency, self.keeper)
                    loop.start()
                    self.event_loop = loop
        return loop.hand_off(unit, job, job_class, self.stopping)


def describe_running(slot: Slot) -> str:
    """``Sleepy jid=ab12… after 31 s``: a job in flight, for the log."""
    work = slot.work
    if work is None:
        return "a job that had not started yet"
    job = parse_payload(work[1]) if work[1] else {}
    return f"{job.get('class')} jid={job.get('jid')} after {time.time() - work[2]:.0f} s"


def _requeued(unit: UnitOfWork) -> None:
    """Nothing to acknowledge: a job pushed back to its queue was not done."""
