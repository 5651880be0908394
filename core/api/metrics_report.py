"""What a job metrics query (kiq.api.metrics) returns: one job class summed over a window (``JobClassMetrics``),
every class of a window (``MetricsReport``), and one class bucket by bucket (``JobMetricsSeries`` of
``MinuteMetrics``); each with its ``as_dict()`` for JSON.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

from ..keys import HISTOGRAM_BOUNDS_MS, HISTOGRAM_LABELS

__all__ = [
    "HISTOGRAM_BOUNDS_MS",
    "HISTOGRAM_LABELS",
    "JobClassMetrics",
    "JobMetricsSeries",
    "MetricsReport",
    "MinuteMetrics",
]

MINUTE, ROLLUP = 60, 600  # seconds of a window's step: a minute, or Sidekiq 8's 10-minute rollup


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
    bucket of ``HISTOGRAM_BOUNDS_MS`` (fastest first; each bucket of a minute saturates at 65,535; all zeros in an
    ``hours`` window: histograms are kept per minute)."""

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
    """Every job class that ran between ``starts_at`` and ``ends_at`` (the starts of the window's first and last
    buckets, UTC), most total time first; ``step`` is the seconds of a bucket: 60, or 600 in an ``hours`` window."""

    starts_at: datetime.datetime
    ends_at: datetime.datetime
    jobs: list[JobClassMetrics]
    step: int = MINUTE

    def job(self, name: str) -> JobClassMetrics | None:
        """The class named ``name``, None if it did not run in the window."""
        return next((job for job in self.jobs if job.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "starts_at": self.starts_at.isoformat(),
            "ends_at": self.ends_at.isoformat(),
            "step": self.step,
            "jobs": [job.as_dict() for job in self.jobs],
        }


@dataclass(frozen=True)
class MinuteMetrics:
    """One job class in one UTC minute, or 10 minutes in an ``hours`` series (``at``, its start): ``processed``,
    ``failed``, ``total_ms`` (of the successful jobs) and their histogram (zeros for 10 minutes)."""

    at: datetime.datetime
    processed: int
    failed: int
    total_ms: int
    histogram: list[int]

    @property
    def label(self) -> str:
        """``HH:MM``, as Sidekiq's charts label a bucket."""
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
    """One job class over a window, bucket by bucket: ``minutes`` oldest first, every bucket of the window (zeros
    where nothing ran), of ``step`` seconds each (60, or 600 in an ``hours`` series); ``totals`` sums them."""

    name: str
    minutes: list[MinuteMetrics]
    step: int = MINUTE

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
        minutes = [m.as_dict() for m in self.minutes]
        return {"name": self.name, "step": self.step, "totals": self.totals.as_dict(), "minutes": minutes}
