"""Per-job-class execution metrics, in Sidekiq's Redis format, so its Web UI (7.x and 8.x) and ``kiq.api.Metrics`` show
them.

Each job runner (a processor thread, a capsule's event loop) counts the jobs it finished in a ``Recorder``: per
display class (``wrapped`` for ActiveJob-style wrappers, else ``class``), cumulative failures, the time of the jobs
that succeeded, and their histogram. Only the runner's own thread writes its counts, so recording takes no lock:
a clock reading, a dict lookup and two additions per job (about 0.3 µs). The heartbeat's ``MetricsFlusher``
copies the counts (``dict.copy`` and list slices are atomic under the GIL), writes what grew since its last
successful flush, and only then remembers the copy: a flush that Redis refused is written again, whole, by the
next one; nothing is counted twice.

Sidekiq's rules (lib/sidekiq/metrics/tracking.rb): a failed job counts in ``p`` and ``f`` but not in ``ms`` or the
histogram; a job requeued by a shutdown counts nowhere (as in ``stat:processed``). A flush is one MULTI/EXEC of
``HINCRBY`` into each hash of the layout and ``BITFIELD <histogram> OVERFLOW SAT INCRBY u16 #i n`` per class and
histogram family, with their TTLs (kiq.keys). The layout follows ``sidekiq_wire``: 7 (the default) writes Sidekiq
7's minute hash and histogram and Sidekiq 8's minute hash, 10-minute hash and ``h|`` histogram, so the Web UI of
either major shows kiq's jobs; 8 writes Sidekiq 8's only. Writing both costs a few commands per class and flush,
not per job (docs/performance.md, "Job metrics in two key families": bench/metrics_keys.py).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import TYPE_CHECKING, Any, NamedTuple

from ..keys import (
    HISTOGRAM_BOUNDS_MS,
    METRICS_ROLLUP_TTL,
    METRICS_TTL,
    histogram_key,
    keyspace,
    metrics_key,
    sidekiq8_histogram_key,
    sidekiq8_minute_key,
    sidekiq8_rollup_key,
)

if TYPE_CHECKING:
    from ..config import Config

# A class's counts, one list: [failed, seconds spent by the successful jobs (a float), then one counter per
# histogram bucket]. Every success counts in one bucket, so processed = failed + the buckets' sum: one addition
# less per job. The hot path indexes the list with literals (a module constant costs a lookup per job).
FAILED, SECONDS, HISTOGRAM = 0, 1, 2
SIZE = HISTOGRAM + len(HISTOGRAM_BOUNDS_MS)
BOUNDS_S = tuple(bound / 1000 for bound in HISTOGRAM_BOUNDS_MS)  # Sidekiq's ms < bound, as seconds < bound / 1000
MAX_CLASSES = 1000  # distinct class names a runner counts (names come from payloads: a flood of junk stays bounded)


def display_class(job: dict[str, Any]) -> str:
    """The class a job is shown under: the wrapped one of an ActiveJob-style wrapper, else its own."""
    wrapped = job.get("wrapped")
    return wrapped if wrapped.__class__ is str and wrapped else job["class"]


class KeyLayout(NamedTuple):
    """The metrics keys a flush writes: hashes of counts (the key of a UTC minute, its TTL in seconds) and
    histograms (the key of a class and minute; TTL ``METRICS_TTL``)."""

    hashes: tuple[tuple[Callable[[time.struct_time], str], int], ...]
    histograms: tuple[Callable[[str, time.struct_time], str], ...]


SIDEKIQ7_KEYS = KeyLayout(((metrics_key, METRICS_TTL),), (histogram_key,))
SIDEKIQ8_KEYS = KeyLayout(
    ((sidekiq8_minute_key, METRICS_TTL), (sidekiq8_rollup_key, METRICS_ROLLUP_TTL)), (sidekiq8_histogram_key,)
)
BOTH_KEYS = KeyLayout(SIDEKIQ7_KEYS.hashes + SIDEKIQ8_KEYS.hashes, SIDEKIQ7_KEYS.histograms + SIDEKIQ8_KEYS.histograms)
LAYOUTS = {7: BOTH_KEYS, 8: SIDEKIQ8_KEYS}  # sidekiq_wire -> what a flush writes


class Recorder:
    """One runner's cumulative counts per display class. ``counts`` is written by the runner's thread only;
    ``flushed`` (what of it Redis has) by the flusher only."""

    __slots__ = ("counts", "flushed")

    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}
        self.flushed: dict[str, list[float]] = {}

    def succeeded(self, job: dict[str, Any], started: float) -> None:
        """A job that ran to its end; ``started`` is its ``time.perf_counter()`` at the start."""
        seconds = perf_counter() - started
        try:
            counts = self.counts[job.get("wrapped") or job["class"]]
        except (KeyError, TypeError):  # a new class (or a wrapped name that is no string)
            counts = self._add(job)
        counts[1] += seconds
        if seconds < 0.02:  # the first bucket: most jobs
            counts[2] += 1
        else:
            counts[2 + bisect_right(BOUNDS_S, seconds)] += 1

    def failed(self, job: dict[str, Any]) -> None:
        """A job that raised, or whose failure a plugin reported: no time, as in Sidekiq (failures' times vary
        too much to tell a slow job from a broken one)."""
        try:
            counts = self.counts[job.get("wrapped") or job["class"]]
        except (KeyError, TypeError):
            counts = self._add(job)
        counts[0] += 1

    def _add(self, job: dict[str, Any]) -> list[float]:
        name = display_class(job)
        counts = self.counts.get(name)
        if counts is None:
            counts = [0] * SIZE
            if len(self.counts) < MAX_CLASSES:
                self.counts[name] = counts
            # else counted nowhere (the stat:* counters still have the job)
        return counts


class MetricsFlusher:
    """Writes the recorders' new counts to Redis (the launcher's heartbeat, and once more at shutdown)."""

    def __init__(self, config: Config, layout: KeyLayout | None = None) -> None:
        self.config = config
        self.layout = LAYOUTS[config.sidekiq_wire] if layout is None else layout
        self._lock = threading.Lock()  # a stop's last flush may overlap a slow heartbeat's

    def flush(self, recorders: Iterable[Recorder], now: float | None = None) -> int:
        """Add what the recorders counted since the last successful flush to the minute of ``now`` (epoch seconds,
        default: now); returns how many classes were written. A Redis error propagates, and the counts stay for
        the next flush; once the transaction ran, a command Redis failed on its own (a key of another type) is
        logged and not written again (the others were)."""
        with self._lock:
            copies = [(recorder, _copy(recorder.counts)) for recorder in recorders]
            deltas: dict[str, list[int]] = {}
            for recorder, current in copies:
                flushed = recorder.flushed
                for name, counts in current.items():
                    done = flushed.get(name) or _ZERO
                    total = deltas.get(name)
                    if total is None:
                        total = deltas[name] = [0] * SIZE
                    for index in range(SIZE):
                        if index == SECONDS:  # whole ms of the running total: no drift from rounding each flush
                            total[index] += int(counts[index] * 1000) - int(done[index] * 1000)
                        else:
                            total[index] += int(counts[index] - done[index])
            written = {name: delta for name, delta in deltas.items() if any(delta)}
            if written:
                self._write(written, time.gmtime(now))
            for recorder, current in copies:
                recorder.flushed = current
            return len(written)

    def _write(self, deltas: dict[str, list[int]], minute: time.struct_time) -> None:
        keys = keyspace(self.config.redis)
        hashes = [(keys.key(key_of(minute)), ttl) for key_of, ttl in self.layout.hashes]
        pipe = self.config.redis.pipeline(transaction=True)
        for name, delta in deltas.items():  # [failed, ms, histogram...]
            failed = delta[FAILED]
            processed = failed + sum(delta[HISTOGRAM:])
            fields = {"p": processed, "f": failed}
            if processed > failed or delta[SECONDS]:  # Sidekiq writes ms for every class that had a success
                fields["ms"] = delta[SECONDS]
            for key, _ in hashes:
                for metric, count in fields.items():
                    if count or metric == "ms":
                        pipe.hincrby(key, f"{name}|{metric}", count)
            if any(delta[HISTOGRAM:]):
                for histogram_of in self.layout.histograms:
                    gram = keys.key(histogram_of(name, minute))
                    increments = pipe.bitfield(gram, default_overflow="SAT")  # counters stop at 65,535, as Sidekiq
                    for index, count in enumerate(delta[HISTOGRAM:]):
                        if count:
                            increments.incrby("u16", f"#{index}", count)
                    increments.execute()  # queued in the transaction
                    pipe.expire(gram, METRICS_TTL)
        for key, ttl in hashes:
            pipe.expire(key, ttl)
        # an error refusing the transaction (unreachable, maxmemory, read-only replica) raises here: nothing written
        results = pipe.execute(raise_on_error=False)
        errors = [result for result in results if isinstance(result, Exception)]
        if errors:
            self.config.handle_exception(errors[0], {"context": f"job metrics: {len(errors)} writes failed"})


_ZERO = [0] * SIZE


def _copy(counts: dict[str, list[float]]) -> dict[str, list[float]]:
    """A snapshot of a recorder's counts while its thread goes on adding to them."""
    return {name: values[:] for name, values in counts.copy().items()}
