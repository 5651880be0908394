"""Per-job-class execution metrics (Sidekiq's ``Sidekiq::Metrics::Query``): what ran in the last minutes or hours,
how often it failed, how long it took. Workers write them each heartbeat (kiq.server.metrics); so do Ruby Sidekiq 7
and 8, and all are read alike::

    from kiq.api import Metrics

    report = Metrics().top_jobs(minutes=60)        # every class, most time spent first
    for job in report.jobs:
        print(job.name, job.processed, job.failed, job.avg_ms, job.p95_ms)
    series = Metrics().for_job("HardJob", minutes=30)
    series.totals.p95_ms, [(minute.label, minute.processed) for minute in series.minutes]
    Metrics().top_jobs(hours=72)                   # 10-minute buckets: Sidekiq 8's 72-hour view

Times are UTC; a window ends with the current (unfinished) minute, or 10 minutes, as in Sidekiq. A ``minutes``
window (up to 480: Redis keeps minutes 8 hours) reads both key families per minute, Sidekiq 7's and Sidekiq 8's, and
takes the larger value of each field and histogram counter: kiq writes the same counts to both (``sidekiq_wire =
7``), a Ruby Sidekiq 7 process only to 7's, a Sidekiq 8 one only to 8's, so a class run by kiq and one Ruby major
is counted once, exactly. An ``hours`` window (up to 72) reads Sidekiq 8's 10-minute hashes, kept 3 days; it has no
histograms (Sidekiq keeps them per minute, 8 hours), so its percentiles are None. Reading takes a pipeline per
step: one for the count hashes, one for the histograms. What a query returns is in kiq.api.metrics_report.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from ..config import config_or_default
from ..keys import (
    HISTOGRAM_BOUNDS_MS,
    METRICS_ROLLUP_TTL,
    METRICS_TTL,
    Keyspace,
    histogram_key,
    keyspace,
    metrics_key,
    sidekiq8_histogram_key,
    sidekiq8_minute_key,
    sidekiq8_rollup_key,
)
from .metrics_report import MINUTE, ROLLUP, JobClassMetrics, JobMetricsSeries, MetricsReport, MinuteMetrics

if TYPE_CHECKING:
    from redis.client import Pipeline

    from ..config import Config

__all__ = ["Metrics"]

MAX_MINUTES = METRICS_TTL // 60  # older minutes have expired
MAX_HOURS = METRICS_ROLLUP_TTL // 3600  # older 10-minute hashes have expired
_SIZE = len(HISTOGRAM_BOUNDS_MS)
_BUCKETS: list[tuple[str, int | str]] = [("u16", f"#{index}") for index in range(1, len(HISTOGRAM_BOUNDS_MS))]
_METRICS = {"p": 0, "f": 1, "ms": 2}  # a field's metric -> its place in [processed, failed, ms]


Moment = datetime.datetime | float | None
Counts = dict[str, list[int]]  # class -> [processed, failed, ms]


class Metrics:
    """Reads the job metrics of ``config``'s Redis (default: the process-wide config). The queries' ``now`` (an aware
    datetime or epoch seconds; default: the clock) ends the window: it is there to show a past window, and for
    tests. A window is ``minutes`` (1 to 480; the default: 60) or ``hours`` (1 to 72), not both."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config_or_default(config)

    def top_jobs(
        self,
        minutes: int | None = None,
        class_filter: str | None = None,
        now: Moment = None,
        *,
        hours: int | None = None,
    ) -> MetricsReport:
        """Every class that ran in the window, summed over it, most total time first; ``class_filter`` keeps the
        names containing it (any case), as Sidekiq's page filters. Two round trips: the count hashes, then the
        histograms of the classes that succeeded (none in an ``hours`` window)."""
        window = _Window.of(now, minutes, hours, keyspace(self.config.redis))
        pipe = self.config.redis.pipeline(transaction=False)
        for at in window.starts:
            for key in window.hash_keys(at):
                pipe.hgetall(key)
        needle = class_filter.lower() if class_filter else None
        totals: Counts = {}
        timed: list[tuple[str, time.struct_time]] = []  # (class, minute) with a histogram to read
        for at, families in zip(window.starts, window.per_bucket(pipe.execute()), strict=True):
            per_class = _merged([_fields(fields, needle) for fields in families])
            for name, counts in per_class.items():
                total = totals.setdefault(name, [0, 0, 0])
                for index in range(3):
                    total[index] += counts[index]
                if window.step == MINUTE and (counts[0] > counts[1] or counts[2]):
                    timed.append((name, at))
        histograms = {name: [0] * _SIZE for name in totals}  # fastest bucket first
        for (name, _), counts in zip(timed, self._histograms(window, timed), strict=True):
            histogram = histograms[name]
            for index, count in enumerate(counts):
                histogram[index] += count
        jobs = [JobClassMetrics(name, p, f, ms, histograms[name]) for name, (p, f, ms) in totals.items()]
        jobs.sort(key=lambda job: (-job.total_ms, -job.processed, job.name))
        return MetricsReport(window.datetime(window.starts[-1]), window.datetime(window.starts[0]), jobs, window.step)

    def for_job(
        self, name: str, minutes: int | None = None, now: Moment = None, *, hours: int | None = None
    ) -> JobMetricsSeries:
        """``name``'s counts and histogram bucket by bucket over the window, in one round trip."""
        window = _Window.of(now, minutes, hours, keyspace(self.config.redis))
        pipe = self.config.redis.pipeline(transaction=False)
        fields = [f"{name}|p", f"{name}|f", f"{name}|ms"]
        for at in window.starts:
            for key in window.hash_keys(at):
                pipe.hmget(key, fields)
            for key in window.histogram_keys(name, at):
                _fetch_histogram(pipe, key)
        results = pipe.execute()
        hashes, grams = len(window.hash_keys(window.starts[0])), len(window.histogram_keys(name, window.starts[0]))
        series: list[MinuteMetrics] = []
        for at, replies in zip(window.starts, window.per_bucket(results, hashes + grams), strict=True):
            processed, failed, ms = _largest([[_int(value) for value in values] for values in replies[:hashes]], 3)
            histogram = _largest([[int(count) for count in counts] for counts in replies[hashes:]], _SIZE)
            series.append(MinuteMetrics(window.datetime(at), processed, failed, ms, histogram))
        series.reverse()
        return JobMetricsSeries(name, series, window.step)

    def _histograms(self, window: _Window, timed: list[tuple[str, time.struct_time]]) -> list[list[int]]:
        """Each (class, minute)'s histogram, the larger counter of the two families'."""
        if not timed:
            return []
        pipe = self.config.redis.pipeline(transaction=False)
        for name, at in timed:
            for key in window.histogram_keys(name, at):
                _fetch_histogram(pipe, key)
        families = len(window.histogram_keys(*timed[0]))
        replies = window.per_bucket(pipe.execute(), families)
        return [_largest([[int(count) for count in counts] for counts in reply], _SIZE) for reply in replies]


class _Window:
    """The buckets of a query, newest first: UTC minutes, or Sidekiq 8's 10-minute rollups (``hours``)."""

    def __init__(self, starts: list[time.struct_time], step: int, keys: Keyspace) -> None:
        self.starts = starts
        self.step = step
        self.keys = keys

    @classmethod
    def of(cls, now: Moment, minutes: int | None, hours: int | None, keys: Keyspace) -> _Window:
        if minutes is not None and hours is not None:
            raise ValueError(f"give minutes or hours, not both (got minutes={minutes!r}, hours={hours!r})")
        if hours is not None:
            count, step = _count("hours", hours, MAX_HOURS) * 3600 // ROLLUP, ROLLUP
        else:
            count, step = _count("minutes", 60 if minutes is None else minutes, MAX_MINUTES), MINUTE
        epoch = _epoch(now)
        epoch -= epoch % step
        return cls([time.gmtime(epoch - step * offset) for offset in range(count)], step, keys)

    def hash_keys(self, at: time.struct_time) -> tuple[str, ...]:
        """The count hashes of a bucket: Sidekiq 7's and 8's minute, or 8's 10-minute rollup."""
        if self.step == MINUTE:
            return self.keys.key(metrics_key(at)), self.keys.key(sidekiq8_minute_key(at))
        return (self.keys.key(sidekiq8_rollup_key(at)),)

    def histogram_keys(self, name: str, at: time.struct_time) -> tuple[str, ...]:
        """A class's histograms of a bucket: Sidekiq 7's and 8's of a minute, none of 10 minutes."""
        if self.step != MINUTE:
            return ()
        return self.keys.key(histogram_key(name, at)), self.keys.key(sidekiq8_histogram_key(name, at))

    def per_bucket(self, replies: list[Any], size: int | None = None) -> list[list[Any]]:
        """A pipeline's replies cut in runs of ``size`` (default: the hash keys of a bucket)."""
        size = len(self.hash_keys(self.starts[0])) if size is None else size
        return [replies[index : index + size] for index in range(0, len(replies), size)]

    def datetime(self, at: time.struct_time) -> datetime.datetime:
        """The start of the bucket holding ``at``."""
        return datetime.datetime(*at[:4], at.tm_min - at.tm_min % (self.step // 60), tzinfo=datetime.UTC)


def _count(unit: str, value: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"{unit} must be an integer from 1 to {most}, got {value!r}")
    return value


def _epoch(now: Moment) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime.datetime):
        if now.tzinfo is None:
            raise ValueError("now must be an aware datetime (metrics are kept in UTC minutes)")
        return now.timestamp()
    return float(now)


def _fetch_histogram(pipe: Pipeline, key: str) -> None:
    """Queue the read of one histogram: 26 counters (zeros when the key does not exist)."""
    pipe.bitfield_ro(key, "u16", "#0", items=_BUCKETS)


def _fields(fields: dict[str, str], needle: str | None) -> Counts:
    """A count hash's fields, ``<class>|<metric>``, per class as [p, f, ms]; the class may hold ``|`` itself (the
    metric is after the last one). Fields of another shape or value, and classes without ``needle``, are skipped."""
    parsed: Counts = {}
    for key, value in fields.items():
        name, _, metric = key.rpartition("|")
        index = _METRICS.get(metric)
        if name and index is not None and value.isdigit() and (needle is None or needle in name.lower()):
            parsed.setdefault(name, [0, 0, 0])[index] += int(value)
    return parsed


def _merged(families: list[Counts]) -> Counts:
    """One bucket's counts from each key family, each class's field the largest of the families' (see above)."""
    merged: Counts = {}
    for counts in families:
        for name, values in counts.items():
            merged[name] = _largest([merged.get(name, [0, 0, 0]), values], 3)
    return merged


def _largest(rows: list[list[int]], size: int) -> list[int]:
    """Column by column, the largest of ``rows`` (zeros without a row)."""
    return [max(column) for column in zip(*rows, strict=True)] if rows else [0] * size


def _int(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0
