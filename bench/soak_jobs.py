"""The soak's jobs (bench/soak.py), loaded by its workers with ``-r bench.soak_jobs``.

Each run of a job appends one line to ``$KIQ_SOAK_DIR/done-<pid>.log``: ``<finished> <kind> <label> <enqueued_at>``.
The log is outside Redis on purpose: the soak restarts Redis and fills its memory, and what it counts (jobs done,
lost, run twice) must not depend on the server it is testing. A line is one ``write`` to a file opened with
``O_APPEND``, so lines of concurrent threads and processes never interleave, and a ``kill -9`` loses at most the
line of the job it cut short (which then runs again: a redelivery, counted as a duplicate).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import kiq

WALK_ITEM_SECONDS = 0.05  # an iterable job's item: long enough that a kill -9 cuts some walks in the middle
SPIN_SECONDS = 0.001  # a sync job's CPU work

_lock = threading.Lock()
_files: dict[int, int] = {}  # pid -> descriptor of that process's log (a forked child opens its own)


def record(kind: str, label: str, enqueued_at: Any) -> None:
    pid = os.getpid()
    with _lock:
        fd = _files.get(pid)
        if fd is None:
            path = os.path.join(os.environ["KIQ_SOAK_DIR"], f"done-{pid}.log")
            fd = _files[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    enqueued = enqueued_at if isinstance(enqueued_at, int | float) else 0.0
    os.write(fd, f"{time.time():.3f} {kind} {label} {enqueued:.3f}\n".encode())


class SoakSync(kiq.Job):
    def perform(self, label: str) -> None:
        deadline = time.perf_counter() + SPIN_SECONDS
        while time.perf_counter() < deadline:
            pass
        record("sync", label, self.job.get("enqueued_at"))


class SoakAsync(kiq.Job):
    kiq_options = {"queue": "async"}

    async def perform(self, label: str) -> None:
        await asyncio.sleep(0.01)
        record("async", label, self.job.get("enqueued_at"))


class SoakStep(kiq.Job):
    """A workflow step (pushed with ``.si``: it gets only its label); its result is its label."""

    def perform(self, label: str) -> str:
        record("step", label, self.job.get("enqueued_at"))
        return label


class SoakWalk(kiq.IterableJob):
    """Walks ``items`` items, each recorded (``item <label>:<i>``), then records its completion (``walk``)."""

    kiq_options = {"queue": "walks"}
    iteration_flush_interval = 0.5

    def build_enumerator(self, label: str, items: int, *, cursor: Any) -> Iterator[tuple[int, int]]:
        start = cursor or 0
        return ((index, index) for index in range(start, items))

    def each_iteration(self, index: int, label: str, items: int) -> None:
        time.sleep(WALK_ITEM_SECONDS)
        record("item", f"{label}:{index}", 0.0)

    def on_complete(self) -> None:
        record("walk", str(self.job["args"][0]), self.job.get("enqueued_at"))
