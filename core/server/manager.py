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
from typing import TYPE_CHECKING

from ..config import DEFAULT_CAPSULE
from ..fetcher import Capsule
from .fetch import fetcher_for
from .processor import Processor, RedisOutage

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")

KILL_GRACE = 2.0  # seconds interrupted threads get to unwind before the process exits anyway
STOP_POLL = 0.1  # seconds between checks for a second TERM while waiting for running jobs


def capsules_for(config: Config, identity: str = "") -> list[Capsule]:
    """The default capsule (the ``queues`` and ``concurrency`` settings) and every capsule ``config.add_capsule``
    declared."""
    capsules = [Capsule(DEFAULT_CAPSULE, list(config.queues), config.concurrency, config, identity)]
    capsules += [Capsule(name, queues, n, config, identity) for name, (queues, n) in config.capsules.items()]
    return capsules


class Manager:
    """The processors of one capsule, sharing its fetcher."""

    def __init__(self, capsule: Capsule, outage: RedisOutage | None = None) -> None:
        self.capsule = capsule
        self.fetcher = fetcher_for(capsule)
        self.stopping = threading.Event()
        self._hard_shutdown = threading.Lock()
        self._hard_shutdown_done = False
        outage = outage or RedisOutage(capsule.config)
        self.processors = [
            Processor(capsule.config, self.fetcher, self.stopping, outage, f"kiq-{capsule.name}-{index}")
            for index in range(capsule.concurrency)
        ]

    def start(self) -> None:
        for processor in self.processors:
            processor.start()

    def quiet(self) -> None:
        """Stop fetching; running jobs go on."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.fetcher.quiet()

    def wait(self, deadline: float, cut_short: threading.Event | None = None) -> bool:
        """Wait (monotonic ``deadline``, or until ``cut_short`` is set) for the processor threads to end; True
        when all did."""
        for processor in self.processors:
            while processor.thread.is_alive() and (remaining := deadline - time.monotonic()) > 0:
                if cut_short is not None and cut_short.is_set():
                    break
                processor.thread.join(min(remaining, STOP_POLL))
        return not any(processor.thread.is_alive() for processor in self.processors)

    def stop(self, deadline: float, cut_short: threading.Event | None = None) -> None:
        """Quiet, wait for the running jobs until ``deadline`` (or ``cut_short``, a second TERM), then requeue and
        interrupt what still runs. The fetcher stays open (``close``): a plugin may still acknowledge jobs."""
        self.quiet()
        if not self.wait(deadline, cut_short):
            self.hard_shutdown()

    def close(self) -> None:
        """The fetcher stops for good (e.g. the reliable one's working list is emptied)."""
        self.fetcher.close()

    def hard_shutdown(self) -> None:
        """The deadline passed: requeue the jobs still running, then interrupt their threads. Requeue first,
        because running a job twice is better than losing it."""
        with self._hard_shutdown:
            if self._hard_shutdown_done:
                return
            self._hard_shutdown_done = True
        busy = [processor for processor in self.processors if processor.unit is not None]
        units = [unit for processor in busy if (unit := processor.unit) is not None]
        log.warning("terminating %d busy threads of capsule %s", len(busy), self.capsule.name)
        self.fetcher.bulk_requeue(units)
        for processor in busy:
            processor.kill()
        self.wait(time.monotonic() + KILL_GRACE)  # give the threads a moment to unwind their finally blocks
