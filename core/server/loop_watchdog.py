"""The loop-lag watchdog: a WARNING, while it happens, when an async job blocks its capsule's event loop.

A coroutine that calls blocking code (``time.sleep``, a synchronous HTTP or database client, a long computation)
stalls every other async job of its loop, and the loop itself cannot notice: it is the thing that is stuck. So the
loop only beats (a ``call_later`` tick records the time), and a thread of its own watches the beat. When the next
beat is ``async_block_warning`` seconds late, it logs one WARNING naming the running job (class and jid)
and the loop thread's current stack (``sys._current_frames``), i.e. the blocking call; when the loop beats again it
logs at INFO how long the block lasted. The cost is one callback on the loop and one wake-up of the thread every
quarter of the threshold (at most 0.25 s). asyncio's own debug mode reports a slow callback only after it
returned, without the job, and costs on every callback.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Any

log = logging.getLogger("kiq")

MAX_BEAT = 0.25  # seconds between beats at most (a shorter threshold beats four times per threshold)


class LoopWatchdog:
    """Watches one event loop from a daemon thread; ``threshold`` 0 disables it (start and stop do nothing)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, threshold: float) -> None:
        self.loop = loop
        self.name = name
        self.threshold = threshold
        self.interval = min(threshold / 4, MAX_BEAT)
        self._jobs: dict[asyncio.Task[Any], dict[str, Any]] = {}  # the loop's running jobs, by task
        self._beat = time.monotonic()
        self._loop_thread: int | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)

    def start(self) -> None:
        """Begin beating (on the loop, which may not run yet) and watching."""
        if self.threshold > 0:
            self.loop.call_soon_threadsafe(self._tick)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def watch(self, task: asyncio.Task[Any], job: dict[str, Any]) -> None:
        """Name ``job`` in a warning while ``task`` runs (called on the loop)."""
        if self.threshold > 0:
            self._jobs[task] = job
            task.add_done_callback(self._jobs.pop)

    def _tick(self) -> None:
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        if not self._stopped.is_set():
            self.loop.call_later(self.interval, self._tick)

    def _watch(self) -> None:
        warned: float | None = None  # the beat that the current block's warning was about
        while not self._stopped.wait(self.interval):
            beat = self._beat
            if warned is not None and beat != warned:
                blocked = beat - warned - self.interval
                log.info("the event loop %s runs again, after at least %.1f s blocked", self.name, blocked)
                warned = None
            # blocked: how late the next beat is (the loop may have been idle until just before the block began)
            blocked = time.monotonic() - beat - self.interval
            if warned is None and blocked > self.threshold:
                warned = beat
                self._warn(blocked)

    def _warn(self, blocked: float) -> None:
        task = asyncio.current_task(self.loop) if self.loop.is_running() else None
        job = self._jobs.get(task) if task is not None else None
        frame = sys._current_frames().get(self._loop_thread) if self._loop_thread is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)\n"
        running = f"{job.get('class')} jid={job.get('jid')}" if job is not None else "no job (a callback of the loop)"
        log.warning(
            "the event loop %s has been blocked for %.1f s (async_block_warning = %g) by %s; every other async job "
            "of this loop waits: await instead of blocking, or move the blocking call to asyncio.to_thread. "
            "It is running:\n%s",
            self.name,
            blocked,
            self.threshold,
            running,
            stack.rstrip("\n"),
        )
