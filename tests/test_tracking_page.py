"""`make demo` end to end, and its status page in headless Chromium (Debian's ``chromium``): the page polls the
running demo's endpoints until the task is complete, then shows 100 % and the same counts as the API."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .support import ROOT, missing_service, wait_until

DEMO = ROOT / "examples" / "demo.py"
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.slow


def run_demo(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(DEMO), "--port", "0", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_make_demo_runs_the_task_to_completion_and_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    demo = run_demo("--jobs", "30", log=log)
    try:
        assert demo.wait(150) == 0, log.read_text()
    finally:
        demo.kill()
    output = log.read_text()
    # products 3, 13, 23 fail a business rule; 7 and 22 raise once and finish on their retry
    assert "final counts: enqueued 0, working 0, finished 27, failed 3, error 0" in output
    assert re.search(r"\[#{40}\] 100\.0%", output)
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/tasks/[0-9a-f]{32}/page", output)


def dump_dom(url: str, profile: Path, budget_ms: int) -> str:
    """The page's DOM after ``budget_ms`` of (virtual) time in headless Chromium."""
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout  # fmt: skip


def shown(dom: str, element_id: str) -> int:
    found = re.search(rf'id="{element_id}"[^>]*>(\d+)<', dom)
    assert found, f"#{element_id} not in the page: {dom[:2000]}"
    return int(found.group(1))


def bar_width(dom: str) -> int:
    found = re.search(r'id="fill"[^>]*style="width: (\d+)%', dom)
    assert found, f"no progress bar width in the page: {dom[:2000]}"
    return int(found.group(1))


def test_the_status_page_in_chromium_shows_progress_then_100_percent_with_the_api_counts(tmp_path: Path) -> None:
    if CHROMIUM is None:
        missing_service("chromium is not installed")
    log = tmp_path / "demo.log"
    demo = run_demo("--jobs", "60", "--job-seconds", "1", "--serve", log=log)  # ≥ 6 s of work on 10 threads
    try:
        page_url = wait_until(
            lambda: (m := re.search(r"status page: (\S+/page)", log.read_text())) and m.group(1),
            30, message="the demo's status page URL",
        )  # fmt: skip
        api_url = page_url.removesuffix("/page")
        wait_until(lambda: httpx.get(api_url).json()["done"] > 0, 60, message="the first jobs to be done")
        before = httpx.get(api_url).json()
        running = dump_dom(page_url, tmp_path / "ch", 2000)
        after = httpx.get(api_url).json()
        wait_until(lambda: "serving the status page" in log.read_text(), 150, message="the demo task to complete")
        api = httpx.get(api_url).json()
        final = dump_dom(page_url, tmp_path / "ch", 10000)
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(60)

    # while it ran: the bar was part way, between what the API said just before and just after
    assert not after["complete"], "the task completed while the page loaded: make the demo's jobs slower"
    assert 'data-complete="false"' in running
    assert 0 < shown(running, "percent") == bar_width(running) < 100
    assert before["done"] <= shown(running, "done") <= after["done"]
    # at the end: 100 % and the API's numbers
    assert api["complete"] and api["total"] == 60
    assert shown(final, "percent") == bar_width(final) == 100 and 'data-complete="true"' in final
    assert (shown(final, "done"), shown(final, "total")) == (api["done"], api["total"])
    assert {status: shown(final, f"count-{status}") for status in api["counts"]} == api["counts"]
    rows = dict(re.findall(r'<tr data-job="([0-9a-f]+)" data-status="(\w+)"', final))
    assert rows == {event["job_id"]: event["status"] for event in api["events"]}
    assert api["counts"]["failed"] == 6 and api["counts"]["error"] == 1  # products 3, 13, ..., 53; product 49
