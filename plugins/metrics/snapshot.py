"""What a worker process reports on its metrics port: its job counts, gauges, plugin readings and health, as one
``Snapshot`` (JSON-able: a swarm's child writes it to a file for its parent, kiq.plugins.metrics.swarm); and
``WorkerMetrics``, the state a worker's hooks feed and a snapshot is read from.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import kiq
import kiq.ext
from kiq.api.fleet import plugin_readings

from .liveness import Liveness, liveness_timeout
from .tally import SIZE, JobTally, add_counts, class_label

JobCounts = dict[tuple[str, str], list[float]]  # (queue, class label) -> kiq.plugins.metrics.tally's counts


@dataclass
class Snapshot:
    """A worker's (or a swarm's summed) metrics and health at one moment."""

    jobs: JobCounts = field(default_factory=dict)
    readings: list[kiq.ext.Reading] = field(default_factory=list)  # gauges and plugins' process readings
    stale: list[str] = field(default_factory=list)  # why it is not live (kiq.plugins.metrics.liveness); empty: live
    unready: str = ""  # why it takes no jobs now ("quiet", "stopping"); empty: it does
    written: float = 0.0  # when (epoch seconds), for a swarm child's file

    def to_json(self) -> str:
        return json.dumps(
            {
                "jobs": [[queue, name, counts] for (queue, name), counts in self.jobs.items()],
                "readings": [[r.name, r.kind, r.help, [list(p) for p in r.labels], r.value] for r in self.readings],
                "stale": self.stale,
                "unready": self.unready,
                "written": self.written,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        data = json.loads(text)
        return cls(
            jobs={(queue, name): counts for queue, name, counts in data["jobs"]},
            readings=[
                kiq.ext.Reading(name, value, tuple((k, v) for k, v in labels), kind, help_)
                for name, kind, help_, labels, value in data["readings"]
            ],
            stale=data["stale"],
            unready=data["unready"],
            written=data["written"],
        )


class WorkerMetrics:
    """A worker process's metrics state: its runners' tallies (one per runner, kiq_job_observer), its loops'
    liveness (kiq_loop_tick) and why it takes no jobs (kiq_quiet, kiq_shutdown)."""

    def __init__(self, config: kiq.Config) -> None:
        self.config = config
        self.tallies: list[JobTally] = []
        self.liveness = Liveness()
        self.unready = ""  # "quiet" (TSTP, or a stop's first step), "stopping" (jobs finished or requeued)

    def new_tally(self) -> JobTally:
        tally = JobTally()
        self.tallies.append(tally)
        return tally

    def snapshot(self) -> Snapshot:
        """This process as it is now: its runners' tallies summed (class labels bounded), its busy job threads,
        its concurrency, the plugins' ``"process"`` readings, its liveness and readiness."""
        jobs: JobCounts = {}
        busy = 0
        for tally in list(self.tallies):
            busy += tally.busy
            for (queue, name), counts in tally.snapshot().items():
                add_counts(jobs.setdefault((queue, class_label(name)), [0] * SIZE), counts)
        config = self.config
        concurrency = config.concurrency + sum(threads for _, threads in config.capsules.values())
        readings = [
            kiq.ext.Reading("kiq_busy_threads", busy, help="job threads (and async jobs) running a job now"),
            kiq.ext.Reading("kiq_concurrency", concurrency, help="job threads of the workers"),
            kiq.ext.Reading("kiq_processes", 1, help="worker processes"),
            *plugin_readings(config, "process"),
        ]
        stale = self.liveness.stale(liveness_timeout(config))
        return Snapshot(jobs, readings, stale, self.unready, time.time())
