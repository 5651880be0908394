"""``python -m bench.systems.batch_settle COUNT TIMEOUT``: the batch system's settle (bench/systems/__init__.py).

Started with the worker, after the bulk push made the run's one batch: wait for a line on stdin (the harness sends
it when the queue is empty, so start-up is not timed), then poll the newest batch's status until COUNT of its jobs
are counted succeeded (its outcomes are written by the worker's writer thread, after the jobs ran); print
``{"at": <epoch seconds>, "finished": n}``.
"""

from __future__ import annotations

import json
import sys
import time

from kiq.plugins.batch import BatchStatus, batches, status

POLL = 0.005  # seconds


def wait(count: int, timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    newest = batches(limit=1)
    sys.stdin.readline()
    batch: BatchStatus | None = newest[0] if newest else None
    while True:
        if batch is not None:
            batch = status(batch.bid)
        succeeded = 0 if batch is None else batch.total - batch.pending
        if succeeded >= count or time.monotonic() > deadline:
            break
        time.sleep(POLL)
        if batch is None:
            newest = batches(limit=1)
            batch = newest[0] if newest else None
    return {"at": time.time(), "finished": succeeded}


if __name__ == "__main__":
    print(json.dumps(wait(int(sys.argv[1]), float(sys.argv[2]))))
