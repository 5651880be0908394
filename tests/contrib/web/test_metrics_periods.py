"""The Metrics page's periods in headless Chromium: Sidekiq 8's 1h to 72h, the last three from its 10-minute
buckets, with jobs kiq wrote (kiq.server.metrics' flusher) and jobs Ruby Sidekiq 8 wrote (its flush replayed,
tests/sidekiq8_metrics.py) on one page. With ``KIQ_WEB_SCREENSHOTS=<dir>`` the 72-hour view is saved there as
``metrics-72h.png`` (docs/guide/dashboard.md shows it)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from kiq.server.metrics import SIZE, MetricsFlusher, Recorder
from tests.sidekiq8_metrics import flush

from .conftest import console_errors, save_top


def rows(browser: Any) -> dict[str, list[str]]:
    cells = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
             for row in browser.find_elements(By.CSS_SELECTOR, "#metrics tbody tr")]  # fmt: skip
    return {row[0]: row[1:] for row in cells if len(row) > 1}


def headers(browser: Any, table: str) -> list[str]:
    return [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, f"#{table} thead th")]


def test_the_72_hour_view_shows_sidekiq_8s_ten_minute_buckets(
    e2e_config: kiq.Config, dashboard: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    r = e2e_config.redis
    now = datetime.datetime.now(datetime.UTC)
    recorder = Recorder()  # kiq's own jobs, written by its flusher: 118 successes around 100 ms, 2 failures
    recorder.counts["Shop::Checkout"] = [2, 11.8] + [0] * (SIZE - 2)
    recorder.counts["Shop::Checkout"][2 + 4] = 118
    MetricsFlusher(e2e_config).flush([recorder], now=now.timestamp())
    flush(r, now, "Ruby8::Mailer", 30, ms=600, buckets={0: 30})  # a Ruby Sidekiq 8 process, this minute
    two_days_ago = now - datetime.timedelta(hours=40)  # only Sidekiq 8's 10-minute hash covers it
    for offset, runs in ((0, 12), (25, 9)):
        flush(r, two_days_ago - datetime.timedelta(minutes=offset), "NightlyReport", runs, failed=1, ms=runs * 4000)

    base = dashboard()
    browser.get(base + "/metrics")
    assert browser.title == "Metrics · kiq"
    shown = rows(browser)
    assert shown.keys() == {"Shop::Checkout", "Ruby8::Mailer"}  # the default hour: not 40 hours ago
    assert shown["Shop::Checkout"][:2] == ["120", "2"] and shown["Ruby8::Mailer"][:2] == ["30", "0"]
    assert headers(browser, "metrics")[-2:] == ["p50", "p95"] and shown["Shop::Checkout"][-2:] == ["100.0 ms"] * 2

    browser.find_element(By.CSS_SELECTOR, ".periods").find_element(By.LINK_TEXT, "72h").click()
    assert browser.current_url.endswith("/metrics?period=72h")
    assert browser.find_element(By.CSS_SELECTOR, ".periods a[aria-current=true]").text == "72h"
    shown = rows(browser)
    assert shown.keys() == {"Shop::Checkout", "Ruby8::Mailer", "NightlyReport"}
    assert shown["NightlyReport"][:3] == ["21", "2", "84.00 s"]
    assert "p50" not in headers(browser, "metrics")  # histograms are per minute, kept 8 hours
    assert "10-minute totals" in browser.find_element(By.CSS_SELECTOR, "main p.muted").text
    save_top(browser, tmp_path, "metrics-72h", 480)

    browser.find_element(By.LINK_TEXT, "NightlyReport").click()
    assert browser.title == "Metrics: NightlyReport · kiq" and browser.current_url.endswith("period=72h")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.histogram") == []
    assert headers(browser, "minutes")[0] == "10 minutes"
    per_bucket = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                  for row in browser.find_elements(By.CSS_SELECTOR, "#minutes tbody tr")]  # fmt: skip
    assert sorted(row[1] for row in per_bucket) == ["12", "9"]  # two 10-minute buckets, newest first
    # 8h and less: minute buckets, with the histogram (Shop::Checkout ran this minute)
    browser.get(base + "/metrics/Shop::Checkout?period=8h")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.histogram rect.bucket")
    assert headers(browser, "minutes")[0] == "Minute"
    assert console_errors(browser) == []
