"""The tracking database goes away while a real worker (in this process) runs a task: jobs keep running (none lost
or blocked), more jobs are pushed and run meanwhile, status updates are kept and retried, and everything converges
once the database is back.

Two outages: SQLite's own locking (the test holds an EXCLUSIVE write lock on the database file, so every write
fails with "database is locked" after the 5 s busy timeout while reads keep working, which lets the test watch
the stale state), and a private PostgreSQL server stopped with ``pg_ctl stop -m immediate`` (a crash: open
connections die, new ones are refused) and started again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import kiq
from kiq.plugins.tracking import Tracker
from kiq.plugins.tracking.middleware import PUSH_WAIT
from tests.jobs.tracking import DONE, SlowEnroll
from tests.support import InProcessWorker, wait_until
from tests.tracking_support import PrivatePostgres, track

pytestmark = pytest.mark.slow
JOBS = 100  # jobs of the task, created before the outage (every 10th fails a business rule)
ALONE = 20  # jobs tracked on their own, pushed during the outage


@dataclass
class Outage:
    url: str
    begin: Callable[[], None]
    end: Callable[[], None]
    readable: bool  # whether the test can read the tracking tables during the outage


@pytest.fixture(params=["sqlite", "postgresql"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    if request.param == "postgresql":
        server: PrivatePostgres = request.getfixturevalue("private_postgres")
        yield Outage(server.url, lambda: server.stop("immediate"), server.start, readable=False)
        return
    database = tmp_path / "tracking.db"
    locks: list[sqlite3.Connection] = []

    def begin() -> None:
        lock = sqlite3.connect(database, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        locks.append(lock)

    def end() -> None:
        lock = locks.pop()
        lock.execute("ROLLBACK")
        lock.close()

    yield Outage(f"sqlite:///{database}", begin, end, readable=True)
    for lock in locks:
        lock.close()


def test_a_database_outage_loses_no_job_and_statuses_converge(
    e2e_config: kiq.Config, start_worker: Callable[..., InProcessWorker], outage: Outage
) -> None:
    tracker: Tracker = track(e2e_config, outage.url)
    task_id = tracker.create_task(SlowEnroll, [[n, "fail" if n % 10 == 0 else "ok"] for n in range(JOBS)])
    worker = start_worker(
        "-r", "tests.jobs.tracking", "-c", "2",
        env={"KIQ_PLUGINS": "tracking", "KIQ_TRACKING_DATABASE_URL": outage.url},
    )  # fmt: skip

    def summary() -> dict[str, object]:
        task = tracker.task(task_id, with_events=False)
        assert task is not None
        return task

    wait_until(lambda: summary()["done"] > 0, 30, message="the first jobs to be recorded")  # type: ignore[operator]
    outage.begin()
    try:
        done_at_outage = summary()["done"] if outage.readable else None
        pushing = time.monotonic()
        alone = [SlowEnroll.set(track=True).perform_async(JOBS + n) for n in range(ALONE)]
        # a push waits for its row (PUSH_WAIT) only until one wait timed out: an outage does not block pushes
        assert time.monotonic() - pushing < ALONE * PUSH_WAIT / 2
        wait_until(lambda: e2e_config.redis.llen(DONE) == JOBS + ALONE, 60, message="every job to run meanwhile")
        wait_until(lambda: "database unavailable" in worker.output(), 30, message="the outage to be logged")
        if outage.readable:  # the jobs ran, their statuses wait in the worker
            assert done_at_outage == summary()["done"] < JOBS  # type: ignore[operator]
            assert all(tracker.event(jid) is None for jid in alone if jid)
    finally:
        outage.end()  # the database is back
    wait_until(lambda: summary()["complete"], 60, message="the task's statuses to converge")
    task = tracker.task(task_id)
    assert task is not None
    assert task["counts"] == {"enqueued": 0, "working": 0, "finished": 90, "failed": 10, "error": 0}
    assert all(event["messages"][-1]["text"].startswith("slow ") for event in task["events"])

    def alone_statuses() -> list[str | None]:
        events = [tracker.event(jid) for jid in alone if jid]
        return [event and event["status"] for event in events]

    wait_until(lambda: alone_statuses() == ["finished"] * ALONE, 30, message="the jobs pushed meanwhile to converge")
    ran = sorted(e2e_config.redis.lrange(DONE, 0, -1))
    assert ran == sorted([event["job_id"] for event in task["events"]] + alone)  # each job ran exactly once
    wait_until(lambda: "database is back" in worker.output(), 30, message="the recovery to be logged")
    assert worker.output().count("database unavailable") == 1
    assert worker.stop() == 0
    tracker.writer.close(5)
    tracker.store.engine.dispose()
