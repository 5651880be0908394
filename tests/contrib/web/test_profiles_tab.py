"""The profiling plugin's Profiles tab in headless Chromium, with a profile a real worker made: from the navigation to
the list, into the profile (its facts and call tree), on to pyinstrument's interactive page, served sandboxed and
rendered with nothing loaded from the network; the Firefox Profiler JSON served gzipped as Sidekiq's Data button
serves it. With ``KIQ_WEB_SCREENSHOTS=<dir>`` the run also saves the docs' screenshots there."""

from __future__ import annotations

import gzip
import json
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from tests.jobs.profiling import CrunchReport
from tests.support import FAST, WorkerProcess, wait_until

from .conftest import console_errors

SHOTS = os.environ.get("KIQ_WEB_SCREENSHOTS")


def save(browser: Any, tmp_path: Path, name: str, docs: bool = True) -> None:
    """A screenshot in ``tmp_path``, and in ``KIQ_WEB_SCREENSHOTS`` for the ones the docs show."""
    browser.save_screenshot(str(tmp_path / name))
    if SHOTS and docs:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / name))


def test_the_profiles_tab_lists_a_profile_and_renders_it(
    e2e_config: kiq.Config,
    start_worker: Callable[..., WorkerProcess],
    dashboard: Callable[..., str],
    browser: Any,
    tmp_path: Path,
) -> None:
    config = kiq.Config(redis_url=e2e_config.redis_url, plugins=["profiling"])
    jid = CrunchReport.set(profile="ana", config=config).perform_async(3000)
    start_worker("-r", "tests.jobs.profiling", "-c", "2", env={**FAST, "KIQ_PLUGINS": "profiling"})
    key = f"ana-{jid}"
    wait_until(lambda: config.redis.zscore("profiles", key) is not None, 30, message="the profile to be stored")

    base = dashboard(config=config)
    browser.get(base + "/")
    browser.find_element(By.LINK_TEXT, "Profiles").click()
    assert browser.title == "Profiles · kiq"
    (row,) = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")]
    assert f"ProfilingCrunchReport {jid} ana" in row and row.endswith("done View")

    browser.find_element(By.LINK_TEXT, "View").click()
    assert browser.title == f"Profile {key} · kiq"
    assert "ProfilingCrunchReport" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    tree = browser.find_element(By.CSS_SELECTOR, "main pre").text
    assert "CrunchReport.perform" in tree and "crunch_numbers" in tree and "square_sum" in tree
    save(browser, tmp_path, "profile.png")
    assert console_errors(browser) == []

    browser.find_element(By.LINK_TEXT, "pyinstrument's call tree and timeline").click()
    wait_until(lambda: "crunch_numbers" in browser.find_element(By.ID, "app").text, 15,
               message="pyinstrument's page to render the call tree")  # fmt: skip
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [name for name in loaded if not name.startswith("data:")] == []  # nothing from the network
    assert f"ProfilingCrunchReport {jid}, profile token 'ana'" in browser.find_element(By.ID, "app").text
    save(browser, tmp_path, "profile-interactive.png", docs=False)
    browser.find_element(By.XPATH, "//label[contains(., 'Timeline')]").click()  # the flame chart, over time
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#app canvas"), 15, message="the timeline to draw")
    save(browser, tmp_path, "profile-timeline.png")
    assert console_errors(browser) == []  # a blocked load (a CDN) or a failing script would show here

    with urllib.request.urlopen(f"{base}/tabs/profiles/{key}/data") as answer:  # as Sidekiq's Data button
        assert answer.headers["Content-Encoding"] == "gzip"
        profile = json.loads(gzip.decompress(answer.read()))
    assert profile["meta"]["product"] == "Python/kiq (pyinstrument)"
