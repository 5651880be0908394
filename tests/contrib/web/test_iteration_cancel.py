"""Cancel on the Busy page, in headless Chromium, on an iterable job a real worker is running: the row shows the job's
run, cursor and runtime; after the click (and its confirmation) the job runs ``on_cancel`` and completes: it leaves
the Busy page, its state is deleted, and it is neither retried nor dead. With ``KIQ_WEB_SCREENSHOTS=<dir>`` the run
saves the docs' screenshot of the Busy page there (``KIQ_WEB_SCREENSHOTS=docs/images``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from kiq.api import DeadSet, RetrySet, Workers, iteration_states
from tests.jobs.web import CANCELLED_KEY, SlowExport
from tests.support import WorkerProcess, wait_until

from .conftest import console_errors
from .test_actions import click

SHOTS = os.environ.get("KIQ_WEB_SCREENSHOTS")


def running(config: kiq.Config, jid: str) -> bool:
    return any(work.payload.get("jid") == jid for work in Workers(config))


def test_cancel_on_the_busy_page_stops_a_running_iterable_job(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    jid = SlowExport.perform_async(1_000_000)
    assert jid is not None
    wait_until(lambda: iteration_states([jid], e2e_config).get(jid), 30, message="the job to save its state")
    wait_until(lambda: running(e2e_config, jid), 30, message="the heartbeat to list the job")
    browser.get(f"{dashboard()}/busy")
    row = browser.find_element(By.XPATH, f"//table[@id='running']//tr[td[normalize-space()='{jid}']]")
    shown = row.find_element(By.CSS_SELECTOR, ".iteration").text
    assert shown.startswith("run 1 · ") and int(row.find_element(By.CSS_SELECTOR, ".cursor").text) > 0
    browser.save_screenshot(str(tmp_path / "busy-iterable.png"))
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / "busy-iterable.png"))

    def accept(browser: Any) -> None:
        alert = browser.switch_to.alert
        assert alert.text == f"Cancel job {jid}? It stops at its next state flush."
        alert.accept()

    click(browser, row.find_element(By.XPATH, ".//button[normalize-space()='Cancel']"), accept)
    redis = e2e_config.redis
    wait_until(lambda: redis.lrange(CANCELLED_KEY, 0, -1) == [jid], 30, message="on_cancel to run")
    wait_until(lambda: not running(e2e_config, jid), 30, message="the job to finish")

    def gone_from_the_page() -> bool:
        browser.refresh()
        return not browser.find_elements(By.XPATH, f"//table[@id='running']//td[normalize-space()='{jid}']")

    wait_until(gone_from_the_page, 30, message="the Busy page to drop the job")
    assert iteration_states([jid], e2e_config) == {}  # completed: its state deleted
    assert RetrySet(e2e_config).size == 0 and DeadSet(e2e_config).size == 0
    assert console_errors(browser) == []
