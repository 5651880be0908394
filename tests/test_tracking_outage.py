"""The tracking database goes away while a real worker runs a task: jobs keep running (none lost or blocked),
status updates are kept and retried, and the task converges once the database is back.

The outage is made with SQLite's own locking: the test holds an EXCLUSIVE write lock on the database file, so
every write of the worker fails with "database is locked" (after the 5 s busy timeout) exactly as when the
database refuses writes; reads keep working (WAL), which lets the test watch the stale state.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import kiq
from kiq.plugins.tracking import Tracker
from tests.jobs.tracking import DONE, SlowEnroll

from .support import WorkerProcess, wait_until
from .tracking_support import track

pytestmark = pytest.mark.slow
JOBS = 60


def test_a_database_outage_loses_no_job_and_statuses_converge(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    database = tmp_path / "tracking.db"
    tracker: Tracker = track(e2e_config, f"sqlite:///{database}")
    task_id = tracker.create_task(SlowEnroll, [[n, "fail" if n % 10 == 0 else "ok"] for n in range(JOBS)])
    worker = start_worker(
        "-r", "tests.jobs.tracking", "-c", "2",
        env={"KIQ_PLUGINS": "tracking", "KIQ_TRACKING_DATABASE_URL": f"sqlite:///{database}"},
    )  # fmt: skip

    def summary() -> dict[str, object]:
        task = tracker.task(task_id, with_events=False)
        assert task is not None
        return task

    wait_until(lambda: summary()["done"] > 0, 30, message="the first jobs to be recorded")  # type: ignore[operator]
    lock = sqlite3.connect(database, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the outage starts
    try:
        done_at_outage = summary()["done"]
        wait_until(lambda: e2e_config.redis.llen(DONE) == JOBS, 60, message="every job to run during the outage")
        wait_until(lambda: "database unavailable" in worker.output(), 30, message="the outage to be logged")
        assert summary()["done"] < JOBS  # the jobs ran, their statuses wait in the worker
        assert done_at_outage == summary()["done"]
    finally:
        lock.execute("ROLLBACK")  # the database is back
        lock.close()
    wait_until(lambda: summary()["complete"], 60, message="the statuses to converge")
    task = tracker.task(task_id)
    assert task is not None
    assert task["counts"] == {"enqueued": 0, "working": 0, "finished": 54, "failed": 6, "error": 0}
    assert all(event["messages"][-1]["text"].startswith("slow ") for event in task["events"])
    assert sorted(e2e_config.redis.lrange(DONE, 0, -1)) == sorted(event["job_id"] for event in task["events"])
    wait_until(lambda: "database is back" in worker.output(), 30, message="the recovery to be logged")
    assert worker.output().count("database unavailable") == 1
    assert worker.stop() == 0
    tracker.writer.close(5)
