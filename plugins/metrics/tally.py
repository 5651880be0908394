"""The counts behind a worker's Prometheus job metrics (``kiq_jobs_processed_total``, ``kiq_jobs_failed_total``,
``kiq_job_duration_seconds``) and its ``kiq_busy_threads``: a ``JobTally`` per job runner, the plugin's
``kiq_job_observer`` (kiq.hookspecs.JobObserver).

Each job runner (a processor thread, a capsule's event loop) has its own ``JobTally`` and is the only writer of
it, so counting takes no lock: per finished attempt a dict lookup and four additions (about 0.4 µs; Prometheus'
own ``Counter.inc`` + ``Histogram.observe`` take a lock each, and in its multiprocess mode write an mmap'd file per
value, ~10x that). A scrape (or a swarm child's snapshot) copies the counts, as the Sidekiq metrics' flusher does
(kiq.server.metrics): ``dict.copy`` and list slices are atomic under the GIL.

An observer sees every attempt, also one that fails before the server middleware runs (a class no worker
registered): that is why the counts come from an observer, not from a middleware.

Keys are ``(queue, class)`` as the payload says (``wrapped`` for an ActiveJob-style wrapper); the *label* a class
gets is decided when the counts are read (``class_label``): its own name only for a class registered in this
worker, else ``"other"``, so junk class names in payloads cannot grow the label set. The tally itself keeps at
most ``MAX_KEYS`` keys, past which the attempts count under ``(queue, "other")``.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import kiq
from kiq.ext import AttemptOutcome

# upper bounds (seconds, inclusive: Prometheus' ``le``) of the duration histogram's buckets; +Inf follows
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
# a key's counts: [processed, failed, seconds (a float), one count per bucket with +Inf last (not cumulative),
# then the iterable jobs' interruptions (kiq_iterations_interrupted_total)]
PROCESSED, FAILED, SECONDS, BUCKETS = 0, 1, 2, 3
INTERRUPTED = BUCKETS + len(DURATION_BUCKETS) + 1
SIZE = INTERRUPTED + 1
MAX_KEYS = 1000
OTHER = "other"


class JobTally:
    """One runner's counts per ``(queue, class)`` and its attempts under way, written by the runner's thread only."""

    __slots__ = ("busy", "counts")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[float]] = {}
        self.busy = 0  # attempts begun and not ended (an async runner has many at once)

    def started(self, queue: str, job: dict[str, Any]) -> None:
        self.busy += 1

    def finished(self, queue: str, job: dict[str, Any], seconds: float, outcome: AttemptOutcome) -> None:
        """An attempt ended (``"failed"``: it raised, or a plugin reported its failure). A job requeued by a
        shutdown is no attempt: not counted."""
        self.busy -= 1
        if outcome == "requeued":
            return
        if outcome == "interrupted":  # not an attempt that finished: counted apart, no duration
            self._counts(queue, job)[INTERRUPTED] += 1
            return
        counts = self._counts(queue, job)
        counts[0] += 1
        if outcome == "failed":
            counts[1] += 1
        counts[2] += seconds
        if seconds <= 0.005:  # the first bucket: most jobs, without the bisect's call
            counts[3] += 1
        else:
            counts[3 + bisect_left(DURATION_BUCKETS, seconds)] += 1

    def _counts(self, queue: str, job: dict[str, Any]) -> list[float]:
        try:
            return self.counts[(queue, job.get("wrapped") or job["class"])]
        except (KeyError, TypeError):  # a new key (or a wrapped name that is no string)
            return self._add(queue, job)

    def _add(self, queue: str, job: dict[str, Any]) -> list[float]:
        wrapped = job.get("wrapped")
        name = wrapped if isinstance(wrapped, str) and wrapped else str(job.get("class"))
        if len(self.counts) >= MAX_KEYS:
            name = OTHER
        return self.counts.setdefault((queue, name), [0] * SIZE)

    def snapshot(self) -> dict[tuple[str, str], list[float]]:
        """A copy of the counts while the runner goes on adding to them."""
        return {key: values[:] for key, values in self.counts.copy().items()}


def class_label(name: str) -> str:
    """The ``class`` label of a job class name: the name for a class registered in this worker, else ``"other"``
    (names in payloads are data: only the registered ones form a bounded set)."""
    return name if kiq.registry.find(name) is not None else OTHER


def add_counts(into: list[float], counts: list[float]) -> None:
    for index, value in enumerate(counts):
        into[index] += value
