"""One metrics port for a swarm (``kiq worker -p N --metrics-port PORT``): the parent serves it and sums what its
children write.

Each child writes its snapshot (kiq.plugins.metrics.snapshot) every ``SNAPSHOT_INTERVAL`` seconds (and once more
as it stops) to ``<swarm dir>/child-<pid>.json``, atomically (a rename). At a scrape the parent sums the files
(``SwarmMetrics``): counters over every child, gauges over the live ones. When the parent reaps a child
(``kiq_swarm_child_exited``), that child's file is *retired*: its counters are folded into the parent's running
totals and the file removed, so the counters go on growing across a child's restart (the new child starts again
from zero in a file of its own; retired at once, so a pid reused later cannot be mistaken for the dead one).

Why files and not prometheus_client's multiprocess mode: that mode writes an mmap'd value per ``inc``/``observe``
under a lock (~10 µs per job for a counter pair and a histogram, several % of a job's drain, bench/metrics_cost.py),
and its gauges' multiprocess modes would need every gauge declared with one. A snapshot per second costs one
JSON dump per child per second whatever the job rate. The price: a child killed with ``kill -9`` loses the counts
of its last second at most (a graceful stop writes them); docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

import kiq
import kiq.ext

from .snapshot import JobCounts, Snapshot
from .tally import SIZE, add_counts

log = logging.getLogger("kiq")

SNAPSHOT_INTERVAL = 1.0  # seconds between a swarm child's snapshots

ReadingSums = dict[tuple[str, tuple[tuple[str, str], ...]], kiq.ext.Reading]  # (name, labels) -> their sum


class SnapshotWriter:
    """A swarm child's thread writing its snapshot (``snapshot()``) to ``path`` every ``SNAPSHOT_INTERVAL``
    seconds."""

    def __init__(self, snapshot: Callable[[], Snapshot], path: str) -> None:
        self.snapshot = snapshot
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
            text = self.snapshot().to_json()
            temporary = f"{self.path}.tmp"
            with open(temporary, "w") as file:
                file.write(text)
            os.replace(temporary, self.path)
        except Exception as exc:  # the next one may work (a full disk); the worker goes on
            log.warning("could not write this process's metrics to %s: %s", self.path, exc)


def snapshot_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"child-{pid}.json")


class SwarmMetrics:
    """The swarm parent's view of its children's snapshots (``directory``), summed at each scrape."""

    def __init__(self, directory: str, liveness_timeout: float) -> None:
        self.directory = directory
        self.liveness_timeout = liveness_timeout
        self.retired: JobCounts = {}  # the counters of children that exited, folded in
        self.retired_counters: ReadingSums = {}
        self.unready = ""  # the parent's own: "stopping" once it passes a stop on
        self._lock = threading.Lock()  # the reaping main loop and the port's threads

    def child_exited(self, pid: int) -> None:
        """A child was reaped: its counters join the running totals, its file goes."""
        path = snapshot_path(self.directory, pid)
        with self._lock:
            snapshot = _read(path)
            if snapshot is not None:
                self._retire(snapshot)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def snapshot(self) -> Snapshot:
        with self._lock:
            live = [
                snapshot
                for name in sorted(os.listdir(self.directory))
                if name.endswith(".json") and (snapshot := _read(os.path.join(self.directory, name))) is not None
            ]
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
            total.readings.append(kiq.ext.Reading("kiq_processes", 0, help="worker processes"))
        return total


def _add_reading(sums: ReadingSums, reading: kiq.ext.Reading) -> None:
    key = (reading.name, reading.labels)
    before = sums.get(key)
    value = reading.value + (before.value if before is not None else 0)
    sums[key] = kiq.ext.Reading(reading.name, value, reading.labels, reading.kind, reading.help)


def _read(path: str) -> Snapshot | None:
    try:
        with open(path) as file:
            return Snapshot.from_json(file.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable swarm metrics file %s: %s", path, exc)
        return None
