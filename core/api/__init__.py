"""The data API (Sidekiq's ``sidekiq/api``): look at and act on queues, scheduled jobs, retries, dead jobs,
processes and running jobs, and read the per-class job metrics. Everything reads Sidekiq 7's keys, so it works
on a Redis shared with Ruby.

Every class takes an optional ``Config`` (default: the process-wide one)::

    from kiq.api import DeadSet, ProcessSet, Queue, RetrySet, Stats

    Stats().processed, Stats().queues                  # counters, {queue: size}
    Queue("default").latency                           # seconds the oldest job has waited
    RetrySet().find_job(jid).kwargs                    # its keyword arguments ({} when it has none)
    RetrySet().find_job(jid).retry()                   # enqueue a retry now
    DeadSet().retry_all()
    ProcessSet().quiet()                               # stop fetching in every live worker
    Metrics().top_jobs(minutes=60).jobs                # per job class: processed, failed, avg_ms, p95_ms
    iteration_states(work.payload["jid"] for work in Workers())  # iterable jobs' cursor, executions, runtime
"""

from __future__ import annotations

from ..server.scheduled import cleanup_processes
from .iterations import iteration_states, runtime_so_far
from .job_sets import DeadSet, JobSet, RetrySet, ScheduledSet, SearchResult, SortedEntry
from .metrics import Metrics
from .metrics_report import (
    HISTOGRAM_BOUNDS_MS,
    HISTOGRAM_LABELS,
    JobClassMetrics,
    JobMetricsSeries,
    MetricsReport,
    MinuteMetrics,
)
from .process_set import Process, ProcessSet, Work, Workers
from .queue import Queue
from .records import JobRecord, display_arguments, shown_job
from .stats import Stats

__all__ = [
    "HISTOGRAM_BOUNDS_MS",
    "HISTOGRAM_LABELS",
    "DeadSet",
    "JobClassMetrics",
    "JobMetricsSeries",
    "JobRecord",
    "JobSet",
    "Metrics",
    "MetricsReport",
    "MinuteMetrics",
    "Process",
    "ProcessSet",
    "Queue",
    "RetrySet",
    "ScheduledSet",
    "SearchResult",
    "SortedEntry",
    "Stats",
    "Work",
    "Workers",
    "cleanup_processes",
    "display_arguments",
    "iteration_states",
    "runtime_so_far",
    "shown_job",
]
