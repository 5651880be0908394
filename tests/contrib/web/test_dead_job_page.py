"""A dead job's page in headless Chromium, with jobs a real worker killed: why it died comes first (the error's class
and message), then its backtrace when the job kept one, else a note saying that its class kept none and how to keep
one (the ``backtrace`` option, the ``default_job_options`` setting); over HTTP, what a page says of an entry that is
not JSON, has no error, or a backtrace that cannot be read, and a retry's page."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from selenium.webdriver.common.by import By

import kiq
from kiq.api import DeadSet
from tests.jobs.web import Brittle, Fragile
from tests.support import WorkerProcess, wait_until

from .conftest import console_errors, screenshot
from .http_support import entry_key, failed, job, parse


def open_dead_job(browser: Any, base: str, job_class: str) -> None:
    browser.get(base + "/dead")
    browser.find_element(By.LINK_TEXT, job_class).click()
    assert browser.title == "Dead job · kiq"


def above(browser: Any, first: str, second: str) -> bool:
    top = browser.find_element(By.CSS_SELECTOR, first).location["y"]
    return bool(top < browser.find_element(By.CSS_SELECTOR, second).location["y"])


def test_a_dead_jobs_page_shows_why_it_died_with_or_without_a_backtrace(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    Fragile.perform_async("kept")  # backtrace: True
    Brittle.perform_async("order 7")  # no backtrace option
    wait_until(lambda: DeadSet(e2e_config).size == 2, 30, message="both jobs to die")
    base = dashboard()

    open_dead_job(browser, base, "Brittle")
    assert browser.find_element(By.TAG_NAME, "h2").text == "Why it died"
    assert browser.find_element(By.ID, "error").text == "ValueError: order 7: the warehouse said no"
    assert above(browser, "#error", "dl.facts"), "the error comes before the job's facts"
    note = browser.find_element(By.ID, "no-backtrace").text
    assert note.startswith("Brittle kept no backtrace") and '"backtrace": True' in note
    assert "default_job_options" in note
    assert browser.find_elements(By.ID, "backtrace") == []
    screenshot(browser, tmp_path / "dead-job-no-backtrace.png")

    open_dead_job(browser, base, "Fragile")
    assert browser.find_element(By.ID, "error").text == "RuntimeError: kept is broken <b>until fixed</b>"
    backtrace = browser.find_element(By.ID, "backtrace").text
    assert "perform" in backtrace and "tests/jobs/web.py" in backtrace
    assert above(browser, "#backtrace", "dl.facts")
    assert browser.find_elements(By.ID, "no-backtrace") == []
    screenshot(browser, tmp_path / "dead-job-backtrace.png")
    assert console_errors(browser) == []


def test_a_job_page_says_when_there_is_no_error_or_no_readable_backtrace(
    e2e_config: kiq.Config, dashboard: Callable[..., str]
) -> None:
    redis = e2e_config.redis
    redis.zadd("dead", {"{not json": 10.0, json.dumps(job("moved-by-hand")): 20.0,
                        json.dumps(failed("garbled", error_backtrace="!!not base64")): 30.0})  # fmt: skip
    redis.zadd("retry", {json.dumps(failed("retrying")): 40.0})
    with httpx.Client(base_url=dashboard()) as client:
        pages = {name: parse(client.get(f"/{path}").text) for name, path in (
            ("unparseable", "dead/10.0-"), ("no error", f"dead/{entry_key(20.0, 'moved-by-hand')}"),
            ("garbled", f"dead/{entry_key(30.0, 'garbled')}"), ("retry", f"retries/{entry_key(40.0, 'retrying')}"),
        )}  # fmt: skip
    assert "not valid JSON" in " ".join(pages["unparseable"].texts["p"])
    assert "No error was recorded" in " ".join(pages["no error"].texts["p"])
    assert "Why it died" in pages["garbled"].texts["h2"]
    assert "cannot be read" in " ".join(pages["garbled"].texts["p"])
    assert "Why it failed" in pages["retry"].texts["h2"]
    assert "RuntimeError: broken" in pages["retry"].texts["pre"]
    assert "Fragile kept no backtrace" in " ".join(pages["retry"].texts["p"])
