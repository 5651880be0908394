"""The limiter's metrics (``kiq_metrics``): per process, how often and how long ``with limiter:`` waited for room
(``kiq_limiter_waits_total``, ``kiq_limiter_wait_seconds_total``); for the fleet, the jobs rescheduled because a
limiter stayed full (``kiq_limiter_reschedules_total``, from the ``kiq:limiter:overrated`` hash).

The label ``limiter`` is ``<kind>:<name>``. Names may be made per customer (``concurrent(f"api-{user}")``), so the
label set is bounded: the first ``MAX_LIMITERS`` names seen get their own label, the rest count as ``"other"``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import kiq

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

    def readings(self) -> list[kiq.Reading]:
        with self._lock:
            counts = {label: values[:] for label, values in self.counts.items()}
        readings = []
        for label, (waits, seconds) in sorted(counts.items()):
            labels = (("limiter", label),)
            readings.append(kiq.Reading("kiq_limiter_waits_total", waits, labels, "counter", WAITS_HELP))
            readings.append(kiq.Reading("kiq_limiter_wait_seconds_total", seconds, labels, "counter", SECONDS_HELP))
        return readings


WAITS_HELP = "acquisitions of a limiter that had to wait for room (they ended with room or OverLimit)"
SECONDS_HELP = "seconds spent waiting for a limiter's room"
waits = WaitCounts()  # one per process: limiters are plain definitions, made anywhere


def reschedules(config: kiq.Config) -> list[kiq.Reading]:
    """The fleet's reschedules per limiter (the first MAX_LIMITERS by name, the rest summed as "other")."""
    from .limiters import OVERRATED  # here: limiters imports this module

    counts = config.redis.hgetall(OVERRATED)
    per_label: dict[str, float] = {}
    for index, (field, count) in enumerate(sorted(counts.items())):
        label = field if index < MAX_LIMITERS else OTHER
        per_label[label] = per_label.get(label, 0) + int(count)
    help_ = "jobs rescheduled because a limiter had no room within its wait_timeout"
    return [
        kiq.Reading("kiq_limiter_reschedules_total", count, (("limiter", label),), "counter", help_)
        for label, count in per_label.items()
    ]
