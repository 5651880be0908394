"""Jobs for the failover tests (tests/test_cluster_failover.py): each leaves its trace in a file, not in Redis,
which loses writes when a primary dies."""

from __future__ import annotations

import time

import kiq


class AppendStarted(kiq.Job):
    """Appends ``<jid> <when it started, time.time()>`` to the file ``path``: one line per run (a job run twice
    shows twice), and the start times tell when jobs ran again after a failover (the jobs running when it struck
    finish after it, so the end times would not)."""

    kiq_name = "AppendStarted"

    def perform(self, path: str) -> None:
        started = time.time()
        with open(path, "a") as out:  # one short write in append mode: lines of concurrent jobs never interleave
            out.write(f"{self.jid} {started:.4f}\n")
