"""Fixtures for the dashboard's tests: the dashboard served over real HTTP in this process (a threaded WSGI
server), Debian's Chromium driven by Selenium (its ``chromedriver``; nothing downloaded), and real workers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kiq
from kiq.contrib.http import serve_in_background
from kiq.contrib.web import Authorize, wsgi_app
from tests.support import FAST, WorkerProcess, missing_service

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
BROWSER_ZONE = "Asia/Tokyo"  # UTC+9, no daylight saving time


def serve(app: Callable[..., Any]) -> tuple[str, Callable[[], None]]:
    """``app`` on a free loopback port: its base URL and a function that stops it."""
    server = serve_in_background(app)

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_port}", stop


@pytest.fixture
def dashboard(e2e_config: kiq.Config) -> Iterator[Callable[..., str]]:
    """``dashboard(read_only=False, authorize=None, config=e2e_config)`` -> the base URL of a dashboard served
    over HTTP (several may run at once); all stop at teardown."""
    stops: list[Callable[[], None]] = []

    def start(read_only: bool = False, authorize: Authorize | None = None, config: kiq.Config | None = None) -> str:
        url, stop = serve(wsgi_app(config or e2e_config, read_only, authorize))
        stops.append(stop)
        return url

    yield start
    for stop in stops:
        stop()


@pytest.fixture(scope="session")
def _driver() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing_service(
            "Debian's chromium and chromium-driver are not installed (apt install chromium chromium-driver)"
        )
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000",
                     "--disable-dev-shm-usage", "--lang=en-US"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # a zone other than the machine's and UTC, so the tests see times converted for the reader
    service = webdriver.ChromeService(CHROMEDRIVER, env={**os.environ, "TZ": BROWSER_ZONE})
    driver = webdriver.Chrome(service=service, options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def browser(_driver: Any) -> Iterator[Any]:
    """The session's Chromium, with no cookie and no console message left from another test."""
    _driver.delete_all_cookies()
    _driver.get_log("browser")
    yield _driver
    _driver.get("about:blank")


@pytest.fixture
def web_worker(start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    """A real ``kiq worker`` running the dashboard tests' jobs (tests.jobs.web), with a heartbeat every 0.5 s."""
    return start_worker("-r", "tests.jobs.web", "-c", "4", "--tag", "shop", env=FAST)


def console_errors(browser: Any) -> list[str]:
    """The browser console's errors since the last call (a CSP violation, a failed request, a script error)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(browser: Any, path: Path) -> Path:
    browser.save_screenshot(str(path))
    return path


def save_top(browser: Any, tmp_path: Path, name: str, height: int) -> None:
    """The top ``height`` pixels of the page (a table and its note, without a screen of empty page) as
    ``<name>.png`` in ``tmp_path`` and, with ``KIQ_WEB_SCREENSHOTS=<dir>``, in that directory (the docs' images)."""
    size = browser.get_window_size()
    browser.set_window_size(size["width"], height)
    try:
        browser.save_screenshot(str(tmp_path / f"{name}.png"))
        if shots := os.environ.get("KIQ_WEB_SCREENSHOTS"):
            Path(shots).mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(Path(shots) / f"{name}.png"))
    finally:
        browser.set_window_size(size["width"], size["height"])
