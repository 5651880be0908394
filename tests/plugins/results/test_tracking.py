"""Results in task tracking, on SQLite and PostgreSQL: a tracked job's event holds its result record (also at
``GET /jobs/<jid>``), and a tracking table made before the ``result`` column existed gets it in place."""

from __future__ import annotations

import httpx
from sqlalchemy import inspect

import kiq
from kiq.contrib.tracking_http import wsgi_app
from kiq.plugins.tracking import Tracker
from kiq.plugins.tracking.store import Store
from kiq.plugins.tracking.writer import Update
from tests.jobs.results import TrackedPrice, TrackedSet
from tests.tracking_support import work_off


def test_a_tracked_jobs_event_holds_its_result_also_over_http(config: kiq.Config, tracker: Tracker) -> None:
    kept = TrackedPrice.perform_async(2)
    broken = TrackedSet.perform_async("set")
    work_off(config)
    assert tracker.writer.flush(10)
    event = tracker.event(str(kept))
    assert event is not None and event["status"] == "finished"
    assert event["result"] == {"value": {"number": 2, "price": 3.0, "tags": ["a", "b"]}}
    failed = tracker.event(str(broken))
    assert failed is not None and failed["status"] == "finished"
    assert "not strict JSON" in failed["result"]["error"]

    http = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
    answer = http.get(f"/jobs/{kept}")
    assert answer.status_code == 200 and answer.json()["result"] == event["result"]


def test_an_event_without_a_kept_result_has_none(config: kiq.Config, tracker: Tracker) -> None:
    jid = TrackedPrice.set(result_ttl=False).perform_async(1)
    work_off(config)
    assert tracker.writer.flush(10)
    event = tracker.event(str(jid))
    assert event is not None and event["status"] == "finished" and event["result"] is None


def test_a_table_made_before_the_result_column_gets_it(tracking_db_url: str) -> None:
    old = Store(tracking_db_url)
    old.init_schema()
    with old.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE kiq_tracking_events DROP COLUMN result")
    assert "result" not in {column["name"] for column in inspect(old.engine).get_columns("kiq_tracking_events")}
    old.engine.dispose()

    store = Store(tracking_db_url)
    store.apply([Update("0" * 24, status="finished", version=6, result='{"value": [1, "two"]}')])
    event = store.event("0" * 24)
    assert event is not None and event["result"] == {"value": [1, "two"]}
    Store(tracking_db_url).init_schema()  # a second process finds it there: nothing to do
    store.engine.dispose()
