"""How often and how long ``with limiter:`` waited for room in this process, per limiter (``waits``), for the
plugin's metrics (kiq.plugins.limiter.metrics). The label of a limiter is ``<kind>:<name>`` for the first
``MAX_LIMITERS`` seen, then ``"other"``: names made per customer (``concurrent(f"api-{user}")``) stay bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_LIMITERS = 100
OTHER = "other"


class WaitCounts:
    """This process's waits per limiter label: [waits, seconds]; threads and event loops add to it."""

    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}
        self._lock = threading.Lock()  # a wait is slow anyway: the lock costs nothing that matters

    @contextmanager
    def waiting(self, field: str) -> Iterator[None]:
        """Around the waits of one acquisition (its sleeps between asks, until a lease or OverLimit)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(field, time.monotonic() - started)

    def add(self, field: str, seconds: float) -> None:
        with self._lock:
            label = field if field in self.counts or len(self.counts) < MAX_LIMITERS else OTHER
            counts = self.counts.setdefault(label, [0, 0.0])
            counts[0] += 1
            counts[1] += seconds

    def copy(self) -> dict[str, list[float]]:
        with self._lock:
            return {label: values[:] for label, values in self.counts.items()}


waits = WaitCounts()  # one per process: limiters are plain definitions, made anywhere
