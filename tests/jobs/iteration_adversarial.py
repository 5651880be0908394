"""Iterable jobs for the adversarial iteration tests (``-r tests.jobs.iteration_adversarial``). They record what they
do in files, not in Redis, so a test can take Redis away (or fill it) while they walk and still read every item run.

``FileWalk(count, pause, base, hold_at)`` walks ``range(count)`` (the cursor of item i is i) and appends each item it
runs, one a line, to ``<base>.items`` and each hook to ``<base>.hooks``. At item ``hold_at`` it writes
``<base>.holding`` and waits (up to 5 minutes) until ``<base>.go`` exists: the test's moment to act.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kiq

QUEUE = "iteration-adversarial"
KILL_ON_INTERRUPT = "ADVERSARIAL_KILL_ON_INTERRUPT"  # env: a worker that SIGKILLs itself at its first interruption
HOLD_LIMIT = 300.0  # seconds a held item waits for the test at most


def _append(path: str, line: str) -> None:
    with open(path, "a") as file:
        file.write(f"{line}\n")


def hold(base: str) -> None:
    """Say ``<base>.holding`` and wait for ``<base>.go``."""
    Path(f"{base}.holding").touch()
    deadline = time.monotonic() + HOLD_LIMIT
    while not Path(f"{base}.go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def items_run(base: Path | str) -> list[int]:
    """The items a ``FileWalk`` ran, in order (repeats included)."""
    path = Path(f"{base}.items")
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def hooks_run(base: Path | str) -> list[str]:
    path = Path(f"{base}.hooks")
    return path.read_text().split() if path.exists() else []


class FileWalk(kiq.IterableJob):
    kiq_name = "AdversarialFileWalk"
    kiq_options = {"queue": QUEUE, "retry": False}  # a lost run would show: nothing retries it

    def build_enumerator(self, count: int, pause: float, base: str, hold_at: int = -1, *, cursor: Any) -> Any:
        return ((item, item) for item in range(cursor or 0, count))

    def each_iteration(self, item: int, count: int, pause: float, base: str, hold_at: int = -1) -> None:
        _append(f"{base}.items", str(item))
        if item == hold_at:
            hold(base)
        if pause:
            time.sleep(pause)

    def on_start(self) -> None:
        _append(f"{self.arguments[2]}.hooks", "start")

    def on_resume(self) -> None:
        _append(f"{self.arguments[2]}.hooks", f"resume:{self.cursor}")

    def on_cancel(self) -> None:
        _append(f"{self.arguments[2]}.hooks", "cancel")

    def on_complete(self) -> None:
        _append(f"{self.arguments[2]}.hooks", "complete")


class AsyncFileWalk(FileWalk):
    """``FileWalk`` on the worker's event loop (the held item waits without blocking the loop)."""

    kiq_name = "AdversarialAsyncFileWalk"

    async def each_iteration(self, item: int, count: int, pause: float, base: str, hold_at: int = -1) -> None:  # type: ignore[override]
        _append(f"{base}.items", str(item))
        if item == hold_at:
            Path(f"{base}.holding").touch()
            deadline = time.monotonic() + HOLD_LIMIT
            while not Path(f"{base}.go").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if pause:
            await asyncio.sleep(pause)


class BadCursor(kiq.IterableJob):
    """Yields good cursors up to item ``good``, then ``bad`` kinds of cursor (a set, NaN, a datetime, bytes)."""

    kiq_name = "AdversarialBadCursor"
    kiq_options = {"queue": QUEUE, "retry": False}
    iteration_flush_interval = 0.0  # a save before every item: the bad cursor is met at once

    def build_enumerator(self, good: int, bad: str, *, cursor: Any) -> Iterator[Any]:
        values = {"set": {1}, "nan": float("nan"), "datetime": datetime.datetime(2026, 1, 1), "bytes": b"\x00"}
        for item in range(cursor or 0, good + 3):
            yield item, (item if item < good else values[bad])

    def each_iteration(self, item: int, good: int, bad: str) -> None:
        pass


class BlocksTheLoop(kiq.IterableJob):
    """An async iterable job whose items block the event loop (``time.sleep`` in a coroutine) for ``block`` s."""

    kiq_name = "AdversarialBlocksTheLoop"
    kiq_options = {"queue": QUEUE, "retry": False}

    async def build_enumerator(self, count: int, block: float, base: str, *, cursor: Any) -> AsyncIterator[Any]:
        for item in range(cursor or 0, count):
            yield item, item

    async def each_iteration(self, item: int, count: int, block: float, base: str) -> None:
        _append(f"{base}.items", str(item))
        time.sleep(block)  # the point: a coroutine that blocks its loop
        await asyncio.sleep(0)


class KillOnInterrupt(kiq.ServerMiddleware):
    """SIGKILLs the worker when a ``FileWalk`` is interrupted (once per walk: ``<base>.killed``): after the walk saved
    its state, before the worker re-pushes it."""

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        try:
            yield
        except kiq.Interrupted:
            marker = Path(f"{job['args'][2]}.killed")
            if isinstance(job_instance, FileWalk) and not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)
            raise


@kiq.configure_server
def _kill_on_interrupt(config: kiq.Config) -> None:
    if os.environ.get(KILL_ON_INTERRUPT):
        config.server_middleware.add(KillOnInterrupt)


class PlainJob(kiq.Job):
    """Not iterable: writes ``<base>.items`` once."""

    kiq_name = "AdversarialPlainJob"
    kiq_options = {"queue": QUEUE, "retry": False}

    def perform(self, base: str) -> None:
        _append(f"{base}.items", "0")
