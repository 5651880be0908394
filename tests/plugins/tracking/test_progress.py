"""``self.progress(done, total)``: the ``kiq_job_progress`` hook, isolated per implementation, and tracking's
``progress`` on the job's event, served by the polling endpoints while the job still runs (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

import kiq
from kiq.contrib.tracking_http import wsgi_app
from kiq.plugins.tracking import Tracker
from kiq.plugins.tracking.middleware import job_update, progress_update
from tests.support import wait_until
from tests.tracking_support import work_off

release = threading.Event()


class Export(kiq.Job):
    """Reports progress as it goes, then waits for the test to have seen it before it finishes."""

    def perform(self, total: int) -> None:
        for done in range(1, total // 2 + 1):
            self.progress(done, total)
        if not release.wait(30):
            raise TimeoutError("the test never released the job")
        self.progress(total, total)


class Rows(kiq.Job):
    def perform(self) -> None:
        self.progress(1200, None)  # a count without a known total
        self.progress(1300.5, 1000)  # past an estimated total: kept as given


def test_a_running_jobs_progress_reaches_its_event_and_the_endpoints(config: kiq.Config, tracker: Tracker) -> None:
    release.clear()
    task_id = tracker.create_task(Export, [[10]])
    jid = tracker.task(task_id)["events"][0]["job_id"]  # type: ignore[index]
    worker = threading.Thread(target=work_off, args=(config,))
    worker.start()
    client = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
    try:

        def running_at_half() -> dict[str, Any] | None:
            events = client.get(f"/tasks/{task_id}/events?since=0").json()["events"]
            event: dict[str, Any] = events[0]
            progress = event["progress"]
            return event if event["status"] == "working" and progress and progress["done"] == 5 else None

        seen = wait_until(running_at_half, timeout=20)
        assert seen is not None and seen["progress"]["total"] == 10 and seen["progress"]["at"] > 0
    finally:
        release.set()
        worker.join(30)
    tracker.writer.flush()
    final = tracker.event(jid)
    assert final is not None and final["status"] == "finished"
    assert (final["progress"]["done"], final["progress"]["total"]) == (10, 10)


def test_progress_without_a_total_and_past_an_estimate_is_kept_as_given(config: kiq.Config, tracker: Tracker) -> None:
    jid = Rows.set(track=True).perform_async()
    work_off(config)
    tracker.writer.flush()
    event = tracker.event(str(jid))
    assert event is not None and (event["progress"]["done"], event["progress"]["total"]) == (1300.5, 1000)


def test_a_later_status_keeps_the_progress_and_a_progress_bumps_the_cursor(
    config: kiq.Config, tracker: Tracker
) -> None:
    task_id = tracker.create_task(Rows, [[]])
    jid = tracker.task(task_id)["events"][0]["job_id"]  # type: ignore[index]
    cursor = tracker.events_since(task_id)["cursor"]  # type: ignore[index]
    tracker.writer.submit(progress_update(jid, 3, 9))
    tracker.writer.flush()
    changed = tracker.events_since(task_id, cursor)
    assert changed is not None and [e["progress"]["done"] for e in changed["events"]] == [3]
    tracker.writer.submit(job_update({"jid": jid, "task_id": task_id, "args": []}, "working", 5, tracker.config))
    tracker.writer.flush()
    event = tracker.event(jid)
    assert event is not None and event["status"] == "working" and event["progress"]["done"] == 3


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[str, float, float | None]] = []
        self.errors: list[str] = []

    @kiq.hookimpl
    def kiq_job_progress(self, job: dict[str, Any], done: float, total: float | None) -> None:
        self.reports.append((job["jid"], done, total))

    @kiq.hookimpl
    def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
        self.errors.append(f"{exc} / {context['context']}")


class Broken:
    @kiq.hookimpl
    def kiq_job_progress(self, job: dict[str, Any]) -> None:
        raise RuntimeError("progress sink down")


def test_the_hook_hears_every_report_and_one_failing_implementation_harms_nothing(config: kiq.Config) -> None:
    recorder = Recorder()
    config.add_plugin(Broken())
    config.add_plugin(recorder)
    jid = Rows.perform_async()
    work_off(config)
    assert recorder.reports == [(jid, 1200, None), (jid, 1300.5, 1000)]
    assert recorder.errors == ["progress sink down / plugin 'Broken' failed in kiq_job_progress"] * 2
    assert config.redis.zcard("retry") == 0  # the job finished


@pytest.mark.parametrize(
    ("done", "total"), [(-1, 10), (True, 10), ("3", 10), (float("nan"), None), (3, -5), (3, "10"), (None, 1)]
)
def test_bad_progress_is_refused_naming_the_values(done: Any, total: Any) -> None:
    with pytest.raises(ValueError, match=r"Rows.progress\(done=.*, total=.*\): done must be a number >= 0"):
        Rows().progress(done, total)


def test_progress_outside_a_worker_does_nothing() -> None:
    Rows().perform()  # perform called directly: no payload, no plugins to tell
