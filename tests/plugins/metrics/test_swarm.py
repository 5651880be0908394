"""A swarm's one metrics port: the sum of its children's snapshot files (kiq.plugins.metrics.swarm), counters
over every child (also those reaped), gauges over the live ones, and a child's stale file failing liveness."""

from __future__ import annotations

import time
from pathlib import Path

import kiq
import kiq.ext
from kiq.plugins.metrics.snapshot import Snapshot
from kiq.plugins.metrics.swarm import SwarmMetrics, snapshot_path
from kiq.plugins.metrics.tally import SIZE


def gauges(snapshot: Snapshot) -> dict[str, float]:
    return {reading.name: reading.value for reading in snapshot.readings}


def test_a_swarm_sums_counters_over_every_child_and_gauges_over_the_live_ones(tmp_path: Path) -> None:
    swarm = SwarmMetrics(str(tmp_path), liveness_timeout=60)

    def write(pid: int, processed: int, busy: int) -> None:
        counts = [0.0] * SIZE
        counts[0] = processed
        readings = [
            kiq.ext.Reading("kiq_busy_threads", busy),
            kiq.ext.Reading("kiq_processes", 1),
            kiq.ext.Reading("kiq_test_total", processed, kind="counter"),
        ]
        snapshot = Snapshot({("default", "OpsFine"): counts}, readings, written=time.time())
        Path(snapshot_path(str(tmp_path), pid)).write_text(snapshot.to_json())

    write(100, processed=10, busy=3)
    write(101, processed=5, busy=2)
    total = swarm.snapshot()
    assert total.jobs[("default", "OpsFine")][0] == 15
    assert gauges(total) == {"kiq_busy_threads": 5, "kiq_processes": 2, "kiq_test_total": 15}
    swarm.child_exited(100)  # reaped: its counters stay in the sum, its gauges leave it, its file is removed
    assert sorted(path.name for path in tmp_path.iterdir()) == ["child-101.json"]
    write(102, processed=1, busy=1)  # its replacement, from zero
    total = swarm.snapshot()
    assert total.jobs[("default", "OpsFine")][0] == 16
    assert gauges(total) == {"kiq_busy_threads": 3, "kiq_processes": 2, "kiq_test_total": 16}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["child-101.json", "child-102.json"]
    assert swarm.snapshot().jobs[("default", "OpsFine")][0] == 16  # retired once, not at every scrape
    swarm.child_exited(103)  # a child reaped before it wrote anything: nothing to retire
    assert swarm.snapshot().jobs[("default", "OpsFine")][0] == 16


def test_a_swarm_child_whose_snapshot_is_older_than_the_liveness_timeout_fails_liveness(tmp_path: Path) -> None:
    swarm = SwarmMetrics(str(tmp_path), liveness_timeout=5)
    fresh = Snapshot(readings=[kiq.ext.Reading("kiq_processes", 1)], written=time.time())
    Path(snapshot_path(str(tmp_path), 200)).write_text(fresh.to_json())
    assert swarm.snapshot().stale == []
    stopped = Snapshot(readings=[kiq.ext.Reading("kiq_processes", 1)], written=time.time() - 30)  # SIGSTOPped 30 s ago
    Path(snapshot_path(str(tmp_path), 201)).write_text(stopped.to_json())
    (reason,) = swarm.snapshot().stale
    assert "a swarm child's metrics are 30 s old" in reason
