"""Per-job-class execution metrics (Sidekiq 7's ``Sidekiq::Metrics::Query``): what ran in the last minutes, how
often it failed, how long it took. Workers write them each heartbeat (kiq.server.metrics); so does Ruby Sidekiq 7,
and both are read alike::

    from kiq.api import Metrics

    report = Metrics().top_jobs(minutes=60)        # every class, most time spent first
    for job in report.jobs:
        print(job.name, job.processed, job.failed, job.avg_ms, job.p95_ms)
    series = Metrics().for_job("HardJob", minutes=30)
    series.totals.p95_ms, [(minute.label, minute.processed) for minute in series.minutes]

Times are UTC minutes; a window of ``minutes`` ends with the current (unfinished) minute, as in Sidekiq. Redis keeps
the data 8 hours. Reading takes a pipeline per step: one for the minute hashes, one for the histograms.
"""

from __future__ import annotations

import datetime
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import config_or_default
from ..keys import HISTOGRAM_BOUNDS_MS, HISTOGRAM_LABELS, METRICS_TTL, histogram_key, metrics_key

if TYPE_CHECKING:
    from redis.client import Pipeline

    from ..config import Config

__all__ = [
    "HISTOGRAM_BOUNDS_MS",
    "HISTOGRAM_LABELS",
    "JobClassMetrics",
    "JobMetricsSeries",
    "Metrics",
    "MetricsReport",
    "MinuteMetrics",
]

MAX_MINUTES = METRICS_TTL // 60  # older minutes have expired
_BUCKETS: list[tuple[str, int | str]] = [("u16", f"#{index}") for index in range(1, len(HISTOGRAM_BOUNDS_MS))]
_METRICS = {"p": 0, "f": 1, "ms": 2}  # a field's metric -> its place in [processed, failed, ms]


def _percentile(histogram: list[int], fraction: float) -> float | None:
    """The upper bound (ms) of the bucket where the cumulative count reaches ``fraction`` of all counts."""
    total = sum(histogram)
    if total == 0:
        return None
    wanted = max(1, math.ceil(fraction * total))
    seen = 0
    for bound, count in zip(HISTOGRAM_BOUNDS_MS, histogram, strict=True):
        seen += count
        if seen >= wanted:
            return float(bound)
    return math.inf  # not reached: the counts add up to ``total``


@dataclass(frozen=True)
class JobClassMetrics:
    """One job class over a window: ``processed`` (failures included), ``failed``, ``total_ms`` spent in the jobs
    that succeeded (a failure's time is not counted, as in Sidekiq), and ``histogram``, the successful jobs per
    bucket of ``HISTOGRAM_BOUNDS_MS`` (fastest first; each bucket of a minute saturates at 65,535)."""

    name: str
    processed: int
    failed: int
    total_ms: int
    histogram: list[int]

    @property
    def succeeded(self) -> int:
        return self.processed - self.failed

    @property
    def avg_ms(self) -> float:
        """Mean milliseconds of a successful job (Sidekiq's ``total_avg``); 0.0 when none succeeded."""
        return self.total_ms / self.succeeded if self.succeeded > 0 else 0.0

    @property
    def bucket_labels(self) -> list[str]:
        """The histogram's bucket labels (``HISTOGRAM_LABELS``: "20ms" ... "335s", "Slow")."""
        return list(HISTOGRAM_LABELS)

    def percentile_ms(self, fraction: float) -> float | None:
        """Milliseconds under which ``fraction`` (0 < fraction <= 1) of the successful jobs ran, at the histogram's
        resolution: the upper bound of the bucket where the cumulative count reaches that share, so 65.0 means
        "less than 65 ms", not 65 ms exactly; ``math.inf`` for Sidekiq's "Slow" bucket (335 s and more); None
        without a timed job."""
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        return _percentile(self.histogram, fraction)

    @property
    def p50_ms(self) -> float | None:
        """The median's bucket bound in ms (see ``percentile_ms``)."""
        return self.percentile_ms(0.5)

    @property
    def p95_ms(self) -> float | None:
        """The 95th percentile's bucket bound in ms (see ``percentile_ms``)."""
        return self.percentile_ms(0.95)

    @property
    def p99_ms(self) -> float | None:
        """The 99th percentile's bucket bound in ms (see ``percentile_ms``)."""
        return self.percentile_ms(0.99)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; a percentile in the "Slow" bucket is None there, with ``slow`` true."""
        p50, p95 = self.p50_ms, self.p95_ms
        return {
            "name": self.name,
            "processed": self.processed,
            "failed": self.failed,
            "total_ms": self.total_ms,
            "avg_ms": self.avg_ms,
            "p50_ms": None if p50 == math.inf else p50,
            "p95_ms": None if p95 == math.inf else p95,
            "slow": math.inf in (p50, p95),
            "histogram": list(self.histogram),
        }


@dataclass(frozen=True)
class MetricsReport:
    """Every job class that ran between ``starts_at`` and ``ends_at`` (the first and the last minute of the
    window, UTC), most total time first."""

    starts_at: datetime.datetime
    ends_at: datetime.datetime
    jobs: list[JobClassMetrics]

    def job(self, name: str) -> JobClassMetrics | None:
        """The class named ``name``, None if it did not run in the window."""
        return next((job for job in self.jobs if job.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "starts_at": self.starts_at.isoformat(),
            "ends_at": self.ends_at.isoformat(),
            "jobs": [job.as_dict() for job in self.jobs],
        }


@dataclass(frozen=True)
class MinuteMetrics:
    """One job class in one UTC minute (``at``, its start): ``processed``, ``failed``, ``total_ms`` (of the
    successful jobs) and their histogram."""

    at: datetime.datetime
    processed: int
    failed: int
    total_ms: int
    histogram: list[int]

    @property
    def label(self) -> str:
        """``HH:MM``, as Sidekiq's charts label a minute."""
        return self.at.strftime("%H:%M")

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "label": self.label,
            "processed": self.processed,
            "failed": self.failed,
            "total_ms": self.total_ms,
            "histogram": list(self.histogram),
        }


@dataclass(frozen=True)
class JobMetricsSeries:
    """One job class over a window, minute by minute: ``minutes`` oldest first, every minute of the window (zeros
    where nothing ran); ``totals`` sums them."""

    name: str
    minutes: list[MinuteMetrics]

    @property
    def starts_at(self) -> datetime.datetime:
        return self.minutes[0].at

    @property
    def ends_at(self) -> datetime.datetime:
        return self.minutes[-1].at

    @property
    def totals(self) -> JobClassMetrics:
        """The whole window: counts, time and histogram summed."""
        return JobClassMetrics(
            self.name,
            sum(minute.processed for minute in self.minutes),
            sum(minute.failed for minute in self.minutes),
            sum(minute.total_ms for minute in self.minutes),
            [sum(column) for column in zip(*(minute.histogram for minute in self.minutes), strict=True)],
        )

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "totals": self.totals.as_dict(), "minutes": [m.as_dict() for m in self.minutes]}


Moment = datetime.datetime | float | None


class Metrics:
    """Reads the job metrics of ``config``'s Redis (default: the process-wide config). The queries' ``now`` (an aware
    datetime or epoch seconds; default: the clock) ends the window: it is there to show a past window, and for
    tests."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config_or_default(config)

    def top_jobs(self, minutes: int = 60, class_filter: str | None = None, now: Moment = None) -> MetricsReport:
        """Every class that ran in the last ``minutes`` (at most 480: the data lives 8 hours), summed over the
        window, most total time first; ``class_filter`` keeps the names containing it (any case), as Sidekiq's
        page filters. Two round trips: the minute hashes, then the histograms of the classes that succeeded."""
        window = _window(now, minutes)
        pipe = self.config.redis.pipeline(transaction=False)
        for minute in window:
            pipe.hgetall(metrics_key(minute))
        needle = class_filter.lower() if class_filter else None
        totals: dict[str, list[int]] = {}
        timed: list[tuple[str, time.struct_time]] = []  # (class, minute) with a histogram to read
        for minute, fields in zip(window, pipe.execute(), strict=True):
            per_class: dict[str, list[int]] = {}
            for name, index, value in _fields(fields):
                if needle is None or needle in name.lower():
                    per_class.setdefault(name, [0, 0, 0])[index] += value
            for name, counts in per_class.items():
                total = totals.setdefault(name, [0, 0, 0])
                for index in range(3):
                    total[index] += counts[index]
                if counts[0] > counts[1] or counts[2]:
                    timed.append((name, minute))
        histograms = {name: [0] * len(HISTOGRAM_BOUNDS_MS) for name in totals}  # fastest bucket first
        for (name, _), counts in zip(timed, self._histograms(timed), strict=True):
            histogram = histograms[name]
            for index, count in enumerate(counts):
                histogram[index] += count
        jobs = [JobClassMetrics(name, p, f, ms, histograms[name]) for name, (p, f, ms) in totals.items()]
        jobs.sort(key=lambda job: (-job.total_ms, -job.processed, job.name))
        return MetricsReport(_datetime(window[-1]), _datetime(window[0]), jobs)

    def for_job(self, name: str, minutes: int = 60, now: Moment = None) -> JobMetricsSeries:
        """``name``'s counts and histogram minute by minute over the last ``minutes`` (at most 480), in one round
        trip."""
        window = _window(now, minutes)
        pipe = self.config.redis.pipeline(transaction=False)
        for minute in window:
            pipe.hmget(metrics_key(minute), [f"{name}|p", f"{name}|f", f"{name}|ms"])
            _fetch_histogram(pipe, name, minute)
        results = pipe.execute()
        series: list[MinuteMetrics] = []
        for minute, (processed, failed, ms), histogram in zip(window, results[::2], results[1::2], strict=True):
            counts = [int(count) for count in histogram]
            series.append(MinuteMetrics(_datetime(minute), _int(processed), _int(failed), _int(ms), counts))
        series.reverse()
        return JobMetricsSeries(name, series)

    def _histograms(self, timed: list[tuple[str, time.struct_time]]) -> list[list[int]]:
        if not timed:
            return []
        pipe = self.config.redis.pipeline(transaction=False)
        for name, minute in timed:
            _fetch_histogram(pipe, name, minute)
        return [[int(count) for count in counts] for counts in pipe.execute()]


def _window(now: Moment, minutes: int) -> list[time.struct_time]:
    """The UTC minutes of the window, newest first."""
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes must be an integer from 1 to {MAX_MINUTES}, got {minutes!r}")
    if now is None:
        epoch = time.time()
    elif isinstance(now, datetime.datetime):
        if now.tzinfo is None:
            raise ValueError("now must be an aware datetime (metrics are kept in UTC minutes)")
        epoch = now.timestamp()
    else:
        epoch = float(now)
    return [time.gmtime(epoch - 60 * offset) for offset in range(minutes)]


def _fetch_histogram(pipe: Pipeline, name: str, minute: time.struct_time) -> None:
    """Queue the read of one class's histogram of one minute: 26 counters (zeros when the key does not exist)."""
    pipe.bitfield_ro(histogram_key(name, minute), "u16", "#0", items=_BUCKETS)


def _datetime(minute: time.struct_time) -> datetime.datetime:
    return datetime.datetime(*minute[:5], tzinfo=datetime.UTC)


def _fields(fields: dict[str, str]) -> list[tuple[str, int, int]]:
    """(class, index in [p, f, ms], value) of a minute hash's fields, ``<class>|<metric>``; the class may hold
    ``|`` itself (the metric is after the last one). Fields of another shape or value are skipped."""
    parsed = []
    for key, value in fields.items():
        name, _, metric = key.rpartition("|")
        index = _METRICS.get(metric)
        if name and index is not None and value.isdigit():
            parsed.append((name, index, int(value)))
    return parsed


def _int(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0
