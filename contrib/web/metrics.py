"""The Metrics page: per job class over the last minutes or hours (runs, failures, total, average, p50 and p95
execution time, from the worker's per-minute buckets, ``kiq.api.Metrics``), and one class's histogram and series.

The same address answers a Prometheus scraper (its ``Accept`` header asks for text/plain or OpenMetrics, not HTML)
with the fleet's gauges in Prometheus' format (``fleet_exposition``): queue sizes and latencies, the set sizes,
the processes with their busy threads and concurrency, and the plugins' fleet readings
(kiq.plugins.metrics.exposition: contrib may use a plugin; it needs ``prometheus_client``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import kiq
from kiq.api import HISTOGRAM_LABELS, Metrics

from .html import Markup, el, link, number, table, when
from .view import NotFound, Page, View

PERIODS = ((60, "1 hour"), (180, "3 hours"), (480, "8 hours"))


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


def _periods(view: View, path: str, minutes: int) -> Markup:
    return el(
        "span",
        "Last ",
        [link(label, view.url(path, {"minutes": m}), aria_current="true" if m == minutes else None)
         for m, label in PERIODS],
        class_="choices",
    )  # fmt: skip


def metrics_page(view: View) -> Page:
    minutes = view.number_param("minutes", 60, 480)
    report = Metrics(view.config).top_jobs(minutes=minutes)
    rows = [
        [
            link(job.name, view.url(f"metrics/{job.name}", {"minutes": minutes})),
            number(job.processed),
            number(job.failed),
            _milliseconds(job.total_ms),
            _milliseconds(job.avg_ms),
            _milliseconds(job.p50_ms),
            _milliseconds(job.p95_ms),
        ]
        for job in report.jobs
    ]
    columns = ["Job", "Runs", "Failures", "Total time", "Average", "p50", "p95"]
    body = Markup(
        _periods(view, "metrics", minutes)
        + table(columns, rows, "No job finished in this period (or metrics are off).", id="metrics")
        + el("p", "p50 and p95 are read from histogram buckets: each is the upper bound of its bucket.", class_="muted")
    )
    return Page("Metrics", body, section="metrics")


def job_class_page(view: View, name: str) -> Page:
    minutes = view.number_param("minutes", 60, 480)
    series = Metrics(view.config).for_job(name, minutes=minutes)
    job = series.totals
    if job.processed == 0 and job.failed == 0:
        raise NotFound(f"no metrics for {name!r} in the last {minutes} minutes")
    summary = el(
        "dl",
        [[el("dt", label), el("dd", value)] for label, value in (
            ("Runs", number(job.processed)), ("Failures", number(job.failed)),
            ("Total time", _milliseconds(job.total_ms)), ("Average", _milliseconds(job.avg_ms)),
            ("p50", _milliseconds(job.p50_ms)), ("p95", _milliseconds(job.p95_ms)),
        )],
        class_="facts",
    )  # fmt: skip
    rows = [
        [when(minute.at.timestamp()), number(minute.processed), number(minute.failed), _milliseconds(minute.total_ms)]
        for minute in reversed(series.minutes)
        if minute.processed or minute.failed
    ]
    body = Markup(
        _periods(view, f"metrics/{name}", minutes)
        + summary
        + el("h2", "Execution time")
        + histogram(job.histogram, list(HISTOGRAM_LABELS))
        + el("h2", "Per minute")
        + table(["Minute", "Runs", "Failures", "Time"], rows, "Nothing in this period.", id="minutes")
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
