"""Every page of the dashboard in headless Chromium, with real data from a real worker: what the page shows is what
the API reads from Redis. With ``KIQ_WEB_SCREENSHOTS=<dir>`` the run also saves the README's screenshots there
(``KIQ_WEB_SCREENSHOTS=docs/images make pytest PYTEST_ARGS=tests/contrib/web/test_pages.py``)."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from selenium.webdriver.common.by import By

import kiq
from kiq.api import DeadSet, Metrics, ProcessSet, RetrySet, Stats
from tests.jobs.web import RUNS_KEY, Fragile, Greet, Nap
from tests.support import WorkerProcess, wait_until

from .conftest import BROWSER_ZONE, console_errors

SHOTS = os.environ.get("KIQ_WEB_SCREENSHOTS")


def text(browser: Any, selector: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, selector).text)


def column(browser: Any, table: str, index: int) -> list[str]:
    return [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr td:nth-child({index})")]


def save(browser: Any, tmp_path: Path, name: str) -> None:
    browser.save_screenshot(str(tmp_path / f"{name}.png"))
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / f"{name}.png"))


@pytest.fixture
def busy_shop(e2e_config: kiq.Config, web_worker: WorkerProcess) -> kiq.Config:
    """A worker that ran 40 Greet jobs and 3 Fragile ones (dead), runs a Nap now, with jobs waiting in a queue
    it does not read, one scheduled and one retry."""
    for index in range(40):
        Greet.perform_async(f"greet {index}")
    for index in range(3):
        Fragile.perform_async(f"fragile {index}")
    Nap.perform_async(60)
    for index in range(30):
        Greet.set(queue="later").perform_async(f"waiting {index}")
    Greet.perform_in(3600, "tomorrow")
    RetrySet(e2e_config).schedule(time.time() + 600, {
        "class": "Fragile", "args": ["retry me"], "queue": "default", "jid": "0123456789abcdef01234567",
        "retry_count": 1, "error_class": "RuntimeError", "error_message": "boom", "failed_at": time.time(),
        "created_at": time.time(), "enqueued_at": time.time(),
    })  # fmt: skip
    redis = e2e_config.redis
    wait_until(lambda: redis.llen(RUNS_KEY) == 40 and DeadSet(e2e_config).size == 3, 30, message="the jobs to run")
    wait_until(lambda: Stats(e2e_config).processed == 43 and Stats(e2e_config).workers_size == 1, 15,
               message="the heartbeat to count them")  # fmt: skip
    wait_until(lambda: Metrics(e2e_config).top_jobs().job("Greet") is not None, 15, message="metrics written")
    return e2e_config


def test_each_page_shows_what_the_worker_did(
    busy_shop: kiq.Config, dashboard: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    base = dashboard()
    stats = Stats(busy_shop)

    browser.get(base + "/")
    assert browser.title == "Dashboard · kiq"
    assert text(browser, "#stat-processed") == "43"
    assert text(browser, "#stat-failed") == "3"
    assert text(browser, "#stat-dead") == "3"
    assert text(browser, "#stat-enqueued") == f"{stats.enqueued}"
    assert text(browser, "#stat-busy") == "1"
    # the live graph polled stats.json at least twice and drew its lines
    wait_until(lambda: browser.find_element(By.ID, "live-graph").get_attribute("data-points") not in (None, "0"),
               20, message="the live graph's second poll")  # fmt: skip
    assert "updated" in text(browser, "#live-status")
    assert text(browser, "#redis-version") == busy_shop.redis.info()["redis_version"]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert (
        browser.find_element(By.CSS_SELECTOR, "svg.history rect.processed title")
        .get_attribute("textContent")
        .endswith("processed")
    )
    assert any(today in title.get_attribute("textContent") and "43 processed" in title.get_attribute("textContent")
               for title in browser.find_elements(By.CSS_SELECTOR, "svg.history rect.processed title"))  # fmt: skip

    browser.get(base + "/busy")
    process = next(iter(ProcessSet(busy_shop)))
    assert column(browser, "processes", 1) == [process.identity]
    assert column(browser, "processes", 2) == ["shop"]
    assert column(browser, "processes", 5) == ["1 / 4"]
    assert column(browser, "running", 3) == ["WebNap"]
    assert column(browser, "running", 5) == ["[60]"]

    browser.get(base + "/queues")
    assert column(browser, "queues", 1) == ["default", "later"]
    assert column(browser, "queues", 2) == ["0", "30"]
    browser.find_element(By.LINK_TEXT, "later").click()
    assert browser.title == "Queue later · kiq"
    assert column(browser, "jobs", 2)[0] == '["waiting 29"]'  # newest first, 25 to a page
    assert len(column(browser, "jobs", 2)) == 25
    browser.find_element(By.LINK_TEXT, "Next ›").click()
    assert column(browser, "jobs", 2) == [f'["waiting {n}"]' for n in range(4, -1, -1)]

    browser.get(base + "/scheduled")
    assert column(browser, "entries", 4) == ["Greet"]
    assert column(browser, "entries", 5) == ['["tomorrow"]']
    browser.get(base + "/retries")
    assert column(browser, "entries", 6) == ["RuntimeError: boom"]
    assert column(browser, "entries", 7) == ["1"]

    browser.get(base + "/dead")
    assert sorted(column(browser, "entries", 5)) == [f'["fragile {n}"]' for n in range(3)]
    # times are shown in the reader's zone, with the zone's name (the browser runs in Tokyo here); UTC as a tooltip
    shown_time = browser.find_element(By.CSS_SELECTOR, "#entries time")
    moment = datetime.datetime.fromtimestamp(float(shown_time.get_attribute("data-epoch")), ZoneInfo(BROWSER_ZONE))
    assert moment.strftime("%I:%M:%S") in shown_time.text
    assert shown_time.text.endswith("GMT+9")
    assert shown_time.get_attribute("title").endswith(" UTC")
    browser.find_element(By.CSS_SELECTOR, "#entries td:nth-child(4) a").click()
    assert browser.title == "Dead job · kiq"
    assert text(browser, "#error").startswith("RuntimeError: fragile")
    entry = next(iter(DeadSet(busy_shop)))
    assert entry.jid is not None and entry.jid in text(browser, "#payload")
    assert "perform" in text(browser, "#backtrace")
    save(browser, tmp_path, "dead-job")

    browser.get(base + "/metrics")
    rows = {row[0]: row for row in zip(*(column(browser, "metrics", n) for n in range(1, 4)), strict=True)}
    assert rows["Greet"][1:] == ("40", "0")
    assert rows["Fragile"][1:] == ("3", "3")
    browser.find_element(By.LINK_TEXT, "Greet").click()
    assert browser.title == "Metrics: Greet · kiq"
    assert browser.find_elements(By.CSS_SELECTOR, "svg.histogram rect.bucket")
    assert sum(int(n) for n in column(browser, "minutes", 2)) == 40
    save(browser, tmp_path, "metrics-job")  # metrics.png is test_metrics_run's

    # the live graph follows what the worker does: jobs pushed between polls show as a rise of its line
    browser.get(base + "/?poll=2")
    graph = browser.find_element(By.ID, "live-graph")
    for round_ in range(4):
        for index in range(10 * (round_ + 1)):
            Greet.perform_async(f"live {round_}.{index}")
        points = int(graph.get_attribute("data-points") or 0)
        wait_until(lambda: int(graph.get_attribute("data-points") or 0) > points, 10, message="the next poll")  # noqa: B023
    heights = {point.split(",")[1] for point in
               browser.find_element(By.CSS_SELECTOR, "polyline.processed").get_attribute("points").split()}  # fmt: skip
    assert len(heights) > 1, "the processed line stayed flat"
    save(browser, tmp_path, "dashboard")
    assert console_errors(browser) == []


def test_the_tracking_plugin_adds_its_tasks_tab(
    e2e_config: kiq.Config, dashboard: Callable[..., str], browser: Any, tracking_db_url: str
) -> None:
    from kiq.plugins.tracking import tracker_for
    from tests.jobs.tracking import Enroll

    config = kiq.Config(redis_url=e2e_config.redis_url, plugins=["tracking"], tracking_database_url=tracking_db_url)
    tracker = tracker_for(config)
    tracker.store.init_schema()
    task_id = tracker.create_task(Enroll, [[n, "ok"] for n in range(3)], name="enroll <b>three</b>")
    base = dashboard(config=config)
    browser.get(base + "/")
    browser.find_element(By.LINK_TEXT, "Tasks").click()
    assert browser.title == "Tasks · kiq"
    link = browser.find_element(By.LINK_TEXT, task_id)
    assert "enroll <b>three</b>" in text(browser, "table")  # the name's markup shows as text
    link.click()
    assert task_id in browser.current_url
    assert "3" in text(browser, "dl.facts")
    assert console_errors(browser) == []
