"""The groups plugin's Groups tab in headless Chromium, with a real worker running grouped jobs under a limit: from
the navigation to the tab, each queue's groups with their waiting and running jobs, limits and pauses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from tests.jobs.groups import Sleeps
from tests.support import InProcessWorker, wait_until

from .conftest import console_errors, save_top


def test_the_groups_tab_shows_each_queues_groups(
    e2e_config: kiq.Config,
    start_worker: Callable[..., InProcessWorker],
    dashboard: Callable[..., str],
    browser: Any,
    tmp_path: Path,
) -> None:
    config = e2e_config
    config.add_plugin("groups")
    Sleeps.set(group="acme").perform_bulk([[3000]] * 6)
    Sleeps.set(group="globex").perform_bulk([[3000]] * 2)
    Sleeps.set(group="initech", queue="low").perform_bulk([[10]] * 3)
    kiq.Queue("default").group("acme").concurrency = 2
    kiq.Queue("default").group("globex").concurrency = 3
    kiq.Queue("low").group("initech").pause()
    start_worker("-r", "tests.jobs.groups", "-c", "5", env={"KIQ_PLUGINS": "groups"})
    acme = kiq.Queue("default").group("acme")
    globex = kiq.Queue("default").group("globex")
    wait_until(lambda: acme.running == 2 and globex.running == 2, 15, message="acme and globex running")

    browser.get(dashboard(config=config) + "/")
    browser.find_element(By.LINK_TEXT, "Groups").click()
    assert browser.title == "Groups · kiq"
    rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")]
    assert rows == ["acme 4 2 2", "globex 0 2 3", "initech 3 0 default paused"]
    headings = [heading.text for heading in browser.find_elements(By.CSS_SELECTOR, "h2")]
    assert "Queue default" in headings and "Queue low" in headings
    save_top(browser, tmp_path, "groups", 700)
    assert (tmp_path / "groups.png").stat().st_size > 10_000
    assert console_errors(browser) == []
