"""The Metrics page: per job class over the last 1 to 72 hours, the periods of Sidekiq 8's page (runs, failures,
total, average, and over 8 hours at most, p50 and p95 execution time: ``kiq.api.Metrics``, minute buckets up to 8
hours, Sidekiq 8's 10-minute buckets past that), and one class's histogram and series.

The same address answers a Prometheus scraper (its ``Accept`` header asks for text/plain or OpenMetrics, not HTML)
with the fleet's gauges in Prometheus' format (``fleet_exposition``): queue sizes and latencies, the set sizes,
the processes with their busy threads and concurrency, and the plugins' fleet readings
(kiq.plugins.metrics.exposition: contrib may use a plugin; it needs ``prometheus_client``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import kiq
from kiq.api import HISTOGRAM_LABELS, JobMetricsSeries, Metrics, MetricsReport

from .html import Markup, el, link, number, table, when
from .view import NotFound, Page, View

# ``?period=``: Sidekiq 8's codes and windows (web/application.rb METRICS_PERIODS) as (minutes, hours); the first
# is the default
PERIODS: dict[str, tuple[int | None, int | None]] = {
    "1h": (60, None),
    "2h": (120, None),
    "4h": (240, None),
    "8h": (480, None),
    "24h": (None, 24),
    "48h": (None, 48),
    "72h": (None, 72),
}


__all__ = ["fleet_exposition", "job_class_page", "metrics_page", "wants_metrics"]


def wants_metrics(accept: str | None) -> bool:
    """Whether an ``Accept`` header is a Prometheus scraper's (text/plain or OpenMetrics), not a browser's (which
    asks for text/html)."""
    accept = (accept or "").lower()
    return "application/openmetrics-text" in accept or ("text/plain" in accept and "text/html" not in accept)


def fleet_exposition(config: kiq.Config) -> Callable[[str | None], tuple[bytes, str]]:
    """A function of a scraper's ``Accept`` header to the fleet's metrics and their content type; raises
    ImportError without prometheus_client."""
    from kiq.api.fleet import FleetGauges
    from kiq.plugins.metrics.exposition import MetricsCollector, exposition, registry_of

    registry = registry_of(MetricsCollector(FleetGauges(config)))
    return lambda accept: exposition(registry, accept)


def _milliseconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value == math.inf:
        return "slow (≥ 335 s)"
    return f"{value / 1000:,.2f} s" if value >= 1000 else f"{value:,.1f} ms"


def _period(view: View) -> str:
    """The ``?period=`` asked for, or the first (an unknown one too, as Sidekiq's page does)."""
    period = view.query.get("period", "")
    return period if period in PERIODS else next(iter(PERIODS))


def _periods(view: View, path: str, period: str) -> Markup:
    return el(
        "span",
        "Last ",
        [link(code, view.url(path, {"period": code}), aria_current="true" if code == period else None)
         for code in PERIODS],
        class_="choices periods",
    )  # fmt: skip


def _by_minute(report: MetricsReport | JobMetricsSeries) -> bool:
    """A window of minutes, with histograms (the 10-minute buckets of 24 hours and more have none)."""
    return report.step == 60


def metrics_page(view: View) -> Page:
    period = _period(view)
    minutes, hours = PERIODS[period]
    report = Metrics(view.config).top_jobs(minutes, hours=hours)
    percentiles = _by_minute(report)
    rows = [
        [
            link(job.name, view.url(f"metrics/{job.name}", {"period": period})),
            number(job.processed),
            number(job.failed),
            _milliseconds(job.total_ms),
            _milliseconds(job.avg_ms),
            *((_milliseconds(job.p50_ms), _milliseconds(job.p95_ms)) if percentiles else ()),
        ]
        for job in report.jobs
    ]
    columns = ["Job", "Runs", "Failures", "Total time", "Average", *(("p50", "p95") if percentiles else ())]
    note = (
        "p50 and p95 are read from histogram buckets: each is the upper bound of its bucket."
        if percentiles
        else "From 10-minute totals, kept 3 days (Sidekiq 8's); the histograms behind p50 and p95 are kept 8 hours."
    )
    body = Markup(
        _periods(view, "metrics", period)
        + table(columns, rows, "No job finished in this period (or metrics are off).", id="metrics")
        + el("p", note, class_="muted")
    )
    return Page("Metrics", body, section="metrics")


def job_class_page(view: View, name: str) -> Page:
    period = _period(view)
    minutes, hours = PERIODS[period]
    series = Metrics(view.config).for_job(name, minutes, hours=hours)
    job = series.totals
    if job.processed == 0 and job.failed == 0:
        raise NotFound(f"no metrics for {name!r} in the last {period}")
    by_minute = _by_minute(series)
    facts = [("Runs", number(job.processed)), ("Failures", number(job.failed)),
             ("Total time", _milliseconds(job.total_ms)), ("Average", _milliseconds(job.avg_ms))]  # fmt: skip
    if by_minute:
        facts += [("p50", _milliseconds(job.p50_ms)), ("p95", _milliseconds(job.p95_ms))]
    summary = el("dl", [[el("dt", label), el("dd", value)] for label, value in facts], class_="facts")
    rows = [
        [when(minute.at.timestamp()), number(minute.processed), number(minute.failed), _milliseconds(minute.total_ms)]
        for minute in reversed(series.minutes)
        if minute.processed or minute.failed
    ]
    times = (
        histogram(job.histogram, list(HISTOGRAM_LABELS))
        if by_minute
        else el("p", "Histograms are kept per minute, 8 hours: choose 8h or less to see them.", class_="muted")
    )
    bucket = "Minute" if by_minute else "10 minutes"
    body = Markup(
        _periods(view, f"metrics/{name}", period)
        + summary
        + el("h2", "Execution time")
        + times
        + el("h2", f"Per {bucket.lower()}")
        + table([bucket, "Runs", "Failures", "Time"], rows, "Nothing in this period.", id="minutes")
    )
    return Page(f"Metrics: {name}", body, section="metrics")


def histogram(counts: list[int], labels: list[str]) -> Markup:
    """One bar per bucket, as an SVG with each bucket's label and count."""
    width, height, base = 900, 180, 30
    highest = max([1, *counts])
    step = width / max(1, len(counts))
    bars: list[Markup] = []
    for index, (count, label) in enumerate(zip(counts, labels, strict=True)):
        tall = (height - base - 4) * count / highest
        x = index * step
        bars.append(el(
            "g",
            el("title", f"{label}: {number(count)} runs"),
            el("rect", x=f"{x + 1:.1f}", y=f"{height - base - tall:.1f}", width=f"{step - 2:.1f}",
               height=f"{tall:.1f}", class_="bucket"),
            el("text", label, x=f"{x + step / 2:.1f}", y=str(height - 12), text_anchor="middle", font_size="9"),
        ))  # fmt: skip
    return el("svg", bars, viewBox=f"0 0 {width} {height}", class_="histogram", role="img", aria_label="histogram")
