"""What a worker process reports on its metrics port: its job counts, gauges, plugin readings and health, as one
``Snapshot``; and how a swarm serves one port for all its children.

A single worker builds a snapshot from its launcher at each scrape (``snapshot_of``). In a swarm (``-p N``) the
port is the parent's, and each child writes its snapshot every ``SNAPSHOT_INTERVAL`` seconds (and once more as it
stops) to ``<swarm dir>/child-<index>-<generation>.json``, atomically (a rename). At a scrape the parent sums the
files (``SwarmMetrics``): counters over every child, gauges over the live ones. When the parent reaps a child, that
generation's file is *retired*: its counters are folded into the parent's running totals and the file removed, so
the counters go on growing across a child's restart (a restarted child starts again from zero in a new file).

Why files and not prometheus_client's multiprocess mode: that mode writes an mmap'd value per ``inc``/``observe``
under a lock (~10 µs per job for a counter pair and a histogram, several % of a job's drain, bench/metrics_cost.py),
and its gauges' multiprocess modes would need every gauge declared with one. A snapshot per second costs one
JSON dump per child per second whatever the job rate. The price: a child killed with ``kill -9`` loses the counts
of its last second at most (a graceful stop writes them); docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..readings import Reading
from .job_tally import SIZE, add_counts, class_label

if TYPE_CHECKING:
    from .launcher import Launcher

log = logging.getLogger("kiq")

SNAPSHOT_INTERVAL = 1.0  # seconds between a swarm child's snapshots

JobCounts = dict[tuple[str, str], list[float]]  # (queue, class label) -> kiq.server.job_tally's counts
ReadingSums = dict[tuple[str, tuple[tuple[str, str], ...]], Reading]  # (name, labels) -> their sum


@dataclass
class Snapshot:
    """A worker's (or a swarm's summed) metrics and health at one moment."""

    jobs: JobCounts = field(default_factory=dict)
    readings: list[Reading] = field(default_factory=list)  # gauges and plugins' process readings
    stale: list[str] = field(default_factory=list)  # why it is not live (kiq.server.liveness); empty: live
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
                Reading(name, value, tuple((k, v) for k, v in labels), kind, help_)
                for name, kind, help_, labels, value in data["readings"]
            ],
            stale=data["stale"],
            unready=data["unready"],
            written=data["written"],
        )


def snapshot_of(launcher: Launcher) -> Snapshot:
    """The launcher's process as it is now: its runners' tallies summed (class labels bounded), its busy threads,
    concurrency, the plugins' ``"process"`` readings, liveness and readiness."""
    jobs: JobCounts = {}
    busy = 0
    for manager in launcher.managers:
        busy += sum(1 for slot in manager.slots() if slot.work is not None)
        for runner in manager.runners:
            if runner.tally is None:
                continue
            for (queue, name), counts in runner.tally.snapshot().items():
                add_counts(jobs.setdefault((queue, class_label(name)), [0] * SIZE), counts)
    config = launcher.config
    readings = [
        Reading("kiq_busy_threads", busy, help="job threads (and async jobs) running a job now"),
        Reading("kiq_concurrency", sum(c.concurrency for c in launcher.capsules), help="job threads of the workers"),
        Reading("kiq_processes", 1, help="worker processes"),
        *plugin_readings(config, "process"),
    ]
    unready = "stopping" if launcher.stopping else "quiet" if launcher.quieted else ""
    return Snapshot(jobs, readings, launcher.stale_loops(), unready, time.time())


def plugin_readings(config: Any, scope: str) -> list[Reading]:
    """The plugins' ``kiq_metrics`` readings for ``scope``; an implementation that returns something else than a
    list of readings is logged and left out (one that raises is, by the hook's isolation)."""
    readings: list[Reading] = []
    for result in config.plugins.hook.kiq_metrics(config=config, scope=scope):
        if result is None:
            continue
        if isinstance(result, list | tuple) and all(isinstance(item, Reading) for item in result):
            readings.extend(result)
        else:
            log.error("a plugin's kiq_metrics returned %.100r, not a list of kiq.Reading: left out", result)
    return readings


class SnapshotWriter:
    """A swarm child's thread writing its snapshot to ``path`` every ``SNAPSHOT_INTERVAL`` seconds."""

    def __init__(self, launcher: Launcher, path: str) -> None:
        self.launcher = launcher
        self.path = path
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiq-metrics-snapshot", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write the last snapshot (the counts of a graceful stop are all kept)."""
        self._stopped.set()
        self._thread.join(5)
        self.write()

    def _run(self) -> None:
        while True:
            self.write()
            if self._stopped.wait(SNAPSHOT_INTERVAL):
                return

    def write(self) -> None:
        try:
            text = snapshot_of(self.launcher).to_json()
            temporary = f"{self.path}.tmp"
            with open(temporary, "w") as file:
                file.write(text)
            os.replace(temporary, self.path)
        except Exception as exc:  # the next one may work (a full disk); the worker goes on
            log.warning("could not write this process's metrics to %s: %s", self.path, exc)


def snapshot_path(directory: str, index: int, generation: int) -> str:
    return os.path.join(directory, f"child-{index}-{generation}.json")


class SwarmMetrics:
    """The swarm parent's view of its children's snapshots (``directory``), summed at each scrape."""

    def __init__(self, directory: str, liveness_timeout: float) -> None:
        self.directory = directory
        self.liveness_timeout = liveness_timeout
        self.retired: JobCounts = {}  # the counters of children that exited, folded in
        self.retired_counters: ReadingSums = {}
        self.exited: set[str] = set()  # snapshot files of reaped children, retired at the next scrape
        self.unready = ""  # the parent's own: "stopping" once it passes a stop on
        self._lock = threading.Lock()  # the reaping main loop and the port's threads

    def child_exited(self, index: int, generation: int) -> None:
        with self._lock:
            self.exited.add(snapshot_path(self.directory, index, generation))

    def snapshot(self) -> Snapshot:
        with self._lock:
            live: list[Snapshot] = []
            for name in sorted(os.listdir(self.directory)):
                path = os.path.join(self.directory, name)
                if not name.endswith(".json"):
                    continue
                snapshot = _read(path)
                if path in self.exited:
                    if snapshot is not None:
                        self._retire(snapshot)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    self.exited.discard(path)
                elif snapshot is not None:
                    live.append(snapshot)
            return self._sum(live)

    def _retire(self, snapshot: Snapshot) -> None:
        for key, counts in snapshot.jobs.items():
            add_counts(self.retired.setdefault(key, [0] * SIZE), counts)
        for reading in snapshot.readings:
            if reading.kind == "counter":
                _add_reading(self.retired_counters, reading)

    def _sum(self, live: list[Snapshot]) -> Snapshot:
        total = Snapshot(jobs={key: counts[:] for key, counts in self.retired.items()}, unready=self.unready)
        readings = dict(self.retired_counters)
        now = time.time()
        for snapshot in live:
            for key, counts in snapshot.jobs.items():
                add_counts(total.jobs.setdefault(key, [0] * SIZE), counts)
            for reading in snapshot.readings:
                _add_reading(readings, reading)
            total.stale.extend(snapshot.stale)
            if (age := now - snapshot.written) > self.liveness_timeout:  # a child stopped (SIGSTOP) or hung
                total.stale.append(f"a swarm child's metrics are {age:.0f} s old (liveness_timeout)")
        if not total.unready and live and all(snapshot.unready for snapshot in live):  # every child quiet
            total.unready = live[0].unready
        total.readings = list(readings.values())
        if not any(reading.name == "kiq_processes" for reading in total.readings):
            total.readings.append(Reading("kiq_processes", 0, help="worker processes"))
        return total


def _add_reading(sums: ReadingSums, reading: Reading) -> None:
    key = (reading.name, reading.labels)
    before = sums.get(key)
    value = reading.value + (before.value if before is not None else 0)
    sums[key] = Reading(reading.name, value, reading.labels, reading.kind, reading.help)


def _read(path: str) -> Snapshot | None:
    try:
        with open(path) as file:
            return Snapshot.from_json(file.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable swarm metrics file %s: %s", path, exc)
        return None
