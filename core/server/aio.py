"""Async jobs: a capsule's asyncio event loop, in its own thread, awaiting up to ``async_concurrency`` jobs at once.

The capsule's processor threads fetch as before (one fetcher, one acknowledgement path, reliable fetch included);
a job whose ``perform`` is an ``async def`` is handed over here, and the thread fetches on as soon as the loop has
room. Each async job runs in its own task through the same steps as a thread's job (JobRunner.steps): the
middleware are entered and left in that task, so what they make current (an OTel span, the job's log context, its
acknowledgement) is current inside the coroutine. The loop starts when the capsule meets its first async job: a
worker of sync jobs has no event loop.

A job is acknowledged only after its coroutine was awaited to the end (or its failure recorded). A hard shutdown
requeues the jobs still running, then cancels their tasks: a cancelled job is not acknowledged (``Shutdown``).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ..arguments import call_perform
from ..errors import Shutdown
from ..logging import thread_id
from . import interruption
from .loop_watchdog import LoopWatchdog
from .runner import JobRunner, Slot, begin, resume
from .time_limit import time_limit, timed_out

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import UnitOfWork
    from .outcomes import OutcomeKeeper

STOP_POLL = 0.1  # seconds between checks while waiting for the running jobs at a stop


class EventLoop(JobRunner):
    """A capsule's event loop thread and the async jobs on it."""

    def __init__(self, config: Config, name: str, concurrency: int, keeper: OutcomeKeeper | None = None) -> None:
        super().__init__(config, keeper)  # the worker's keeper: an async job's refused outcome is held like any
        self.name = name
        self.concurrency = concurrency
        self._room = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        # every async job from its hand-over to its end, started or not: what a hard shutdown must requeue
        self._slots: set[Slot] = set()
        self._tasks: dict[Slot, asyncio.Task[None]] = {}  # the loop thread's only
        self._count = 0
        self._cancelling = False  # a hard shutdown cancelled the jobs (a job's own CancelledError is its error)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._watchdog = LoopWatchdog(self._loop, name, config.async_block_warning)
        self._ready = threading.Event()
        self.tid = ""

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        self._watchdog.start()

    def _run(self) -> None:
        self.tid = thread_id()
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    # -- from the processor threads -------------------------------------------------------------------
    def hand_off(self, unit: UnitOfWork, job: dict[str, Any], job_class: type[Any], stopping: threading.Event) -> bool:
        """Give the loop an async job, once it has room (this thread waits meanwhile, so it fetches no more than
        the loop can take). False if the worker began stopping first: the job was not taken."""
        while not self._room.acquire(timeout=STOP_POLL):
            if stopping.is_set():
                return False
        with self._lock:
            self._count += 1
            slot = Slot(f"{self.tid}-{self._count:x}", stopping)
            slot.unit = unit  # visible to a hard shutdown from now on, even before its task starts
            self._slots.add(slot)
        self._loop.call_soon_threadsafe(self._start, slot, job, job_class)
        return True

    @property
    def slots(self) -> list[Slot]:
        with self._lock:
            return list(self._slots)

    def wait(self, deadline: float, cut_short: threading.Event | None = None) -> bool:
        """Wait (until the monotonic ``deadline``, or ``cut_short``) for the async jobs to end; True when all did."""
        while self.slots and time.monotonic() < deadline:
            if cut_short is not None and cut_short.is_set():
                break
            time.sleep(STOP_POLL)
        return not self.slots

    def cancel(self) -> None:
        """Cancel every async job (their units were requeued first): each one's steps end with ``Shutdown``."""
        self._loop.call_soon_threadsafe(self._cancel_all)

    def close(self, timeout: float) -> None:
        """Stop the loop and its thread, once the jobs ended or were cancelled."""
        self._watchdog.stop()
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    # -- in the loop thread ---------------------------------------------------------------------------
    def _start(self, slot: Slot, job: dict[str, Any], job_class: type[Any]) -> None:
        task = self._loop.create_task(self._drive(slot, job, job_class))
        self._tasks[slot] = task
        self._watchdog.watch(task, job)
        task.add_done_callback(lambda _: self._end(slot))

    def _end(self, slot: Slot) -> None:
        self._tasks.pop(slot, None)
        with self._lock:
            self._slots.discard(slot)
        self._room.release()

    def _cancel_all(self) -> None:
        self._cancelling = True
        for task in self._tasks.values():
            task.cancel()

    async def _drive(self, slot: Slot, job: dict[str, Any], job_class: type[Any]) -> None:
        unit = slot.unit
        assert unit is not None
        steps = self.steps(slot, unit, job, job_class)
        call = begin(steps)
        if call is None:
            return
        instance, args = call
        limit = interruption.prepare(instance, slot.stopping, time_limit(job, self.default_time_limit))
        try:
            result = call_perform(instance, args)
            if inspect.isawaitable(result):
                result = await (_limited(result, limit, job) if limit else result)
        except asyncio.CancelledError as exc:
            if self._cancelling:
                resume(steps, error=Shutdown())  # requeued by the hard shutdown that cancelled it
            else:  # the job cancelled itself (or something it awaited): its failure, through the retry rules
                error = RuntimeError(f"{type(instance).__qualname__}.perform was cancelled: {exc}")
                error.__cause__ = exc
                resume(steps, error=error)
        except BaseException as exc:
            resume(steps, error=exc)
        else:
            resume(steps, result)


async def _limited(awaitable: Awaitable[Any], limit: float, job: dict[str, Any]) -> Any:
    """Await a job's coroutine for at most ``limit`` seconds: past it, the coroutine is cancelled and the job fails
    with ``JobTimeout`` (a ``TimeoutError`` the job raised itself stays its own error)."""
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise timed_out(job, limit) from None
        raise
