"""``/metrics`` in Prometheus' text format (needs ``prometheus_client``: ``pip install kiq[metrics]``).

``MetricsCollector`` is a prometheus_client collector made of two parts, read at each scrape:

- a worker's (or a swarm's summed) ``Snapshot`` (kiq.plugins.metrics.snapshot): ``kiq_jobs_processed_total`` and
  ``kiq_jobs_failed_total`` (labels ``queue``, ``class``), the ``kiq_job_duration_seconds`` histogram (same
  labels; every finished attempt, failures included), ``kiq_busy_threads``, ``kiq_concurrency``,
  ``kiq_processes`` and the plugins' ``"process"`` readings;
- the fleet's gauges from Redis (kiq.api.fleet), the same in every port: ``kiq_queue_size`` and
  ``kiq_queue_latency_seconds`` (label ``queue``), ``kiq_retry_set_size``, ``kiq_dead_set_size``,
  ``kiq_scheduled_set_size``, the plugins' ``"fleet"`` readings; ``kiq web`` (no snapshot) adds the registry's
  ``kiq_processes``, ``kiq_busy_threads`` and ``kiq_concurrency`` for every worker.

Redis down, the fleet part is left out of the scrape (and ``kiq_up`` says 0) while the process part is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

import kiq
import kiq.ext
from kiq.api.fleet import FleetGauges

from .snapshot import Snapshot
from .tally import BUCKETS, DURATION_BUCKETS, FAILED, INTERRUPTED, PROCESSED, SECONDS

log = logging.getLogger("kiq")

JOB_LABELS = ["queue", "class"]


class MetricsCollector:
    """A collector (``collect()``) for a prometheus_client registry: a process part (``snapshot``, None for
    ``kiq web``) and the fleet's gauges."""

    def __init__(self, fleet: FleetGauges, snapshot: Callable[[], Snapshot] | None = None) -> None:
        self.fleet = fleet
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        readings: list[kiq.ext.Reading] = []
        if self.snapshot is not None:
            snapshot = self.snapshot()
            yield from job_families(snapshot)
            readings.extend(snapshot.readings)
        up = GaugeMetricFamily("kiq_up", "1 when this scrape could read the fleet's gauges from Redis, else 0")
        try:
            readings.extend(self.fleet.readings())
        except Exception as exc:  # Redis down: the process part is still worth serving
            log.warning("metrics: the fleet's gauges could not be read from Redis: %s", exc)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
        yield up
        yield from reading_families(readings)


def job_families(snapshot: Snapshot) -> Iterator[Metric]:
    processed = CounterMetricFamily(
        "kiq_jobs_processed", "job attempts finished, failures included (Sidekiq's processed)", labels=JOB_LABELS
    )
    failed = CounterMetricFamily("kiq_jobs_failed", "job attempts that failed", labels=JOB_LABELS)
    duration = HistogramMetricFamily(
        "kiq_job_duration_seconds", "seconds a job attempt ran, failures included", labels=JOB_LABELS
    )
    interrupted = CounterMetricFamily(
        "kiq_iterations_interrupted",
        "iterable jobs stopped between two items and pushed again (a stop, max_iteration_runtime, the timeout option)",
        labels=JOB_LABELS,
    )
    for (queue, name), counts in sorted(snapshot.jobs.items()):
        labels = [queue, name]
        processed.add_metric(labels, counts[PROCESSED])
        failed.add_metric(labels, counts[FAILED])
        interrupted.add_metric(labels, counts[INTERRUPTED])
        cumulative = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), counts[BUCKETS:INTERRUPTED], strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        duration.add_metric(labels, buckets, counts[SECONDS])
    yield from (processed, failed, duration, interrupted)


def reading_families(readings: list[kiq.ext.Reading]) -> Iterator[Metric]:
    """One family per metric name (its first reading gives kind, help and label names)."""
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for reading in readings:
        family = families.get(reading.name)
        if family is None:
            names = [label for label, _ in reading.labels]
            make = CounterMetricFamily if reading.kind == "counter" else GaugeMetricFamily
            family = families[reading.name] = make(reading.name, reading.help or reading.name, labels=names)
        family.add_metric([value for _, value in reading.labels], reading.value)
    yield from families.values()


def registry_of(collector: MetricsCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The registry's metrics in the format the scraper's ``Accept`` header asks for (Prometheus' text format, or
    OpenMetrics), and its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
