"""`make demo` end to end, and its status page in headless Chromium (Debian's ``chromium``): the page polls the
running demo's endpoints until the task is complete, then shows 100 % and the same counts as the API; and, driven
over the DevTools protocol, the page mounted in a Flask app and loaded with a trailing slash polls to 100 % with
nothing in the browser's console (no Content-Security-Policy violation, no failed request, no error)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flask
import httpx
import pytest

import kiq
from kiq.contrib.flask import mount_tracking
from kiq.contrib.http import serve_in_background
from kiq.plugins.tracking import Tracker
from tests.jobs.tracking import Enroll
from tests.support import ROOT, missing_service, wait_until
from tests.tracking_support import work_off

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
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/tracking/tasks/[0-9a-f]{32}/page", output)
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/ ", output)
    assert "to keep it up: .venv/bin/python examples/demo.py --serve" in output  # the dashboard ends with the demo


def test_the_demos_dashboard_port_is_chosen_with_make_demo_port() -> None:
    dry_run = subprocess.run(["make", "-n", "demo", "PORT=9123"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "examples/demo.py --port 9123" in dry_run.stdout
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        demo = subprocess.run(
            [sys.executable, str(DEMO), "--port", str(taken.getsockname()[1])],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert "choose another, make demo PORT=9000 (0: any free port)" in demo.stderr


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
        wait_until(
            lambda: "serving the dashboard and the status page" in log.read_text(),
            150,
            message="the demo task to complete",
        )
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


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: it reads
    commands on fd 3 and writes answers and events on fd 4, each a JSON text ended by NUL). ``log`` collects what
    the page's console shows: browser messages (CSP violations, failed loads), console calls, exceptions."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        commands, self._to_browser = os.pipe()
        self._from_browser, answers = os.pipe()
        self.process = subprocess.Popen(  # bash, not sh: dash's redirections take one-digit fds only
            ["bash", "-c", f'exec "$0" "$@" 3<&{commands} 4>&{answers}', CHROMIUM, "--headless", "--no-sandbox",
             "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(commands, answers), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(commands)
        os.close(answers)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        self.log: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._receive()
            if answer.get("id") == self._next_id:
                assert "error" not in answer, answer
                result: dict[str, Any] = answer["result"]
                return result
            if answer.get("method") == "Log.entryAdded":
                self.log.append(answer["params"]["entry"])
            elif answer.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown"):
                self.log.append({"source": answer["method"], **answer["params"]})

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._from_browser, 1 << 16) if ready else b""
            assert chunk, "Chromium did not answer"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        answer: dict[str, Any] = json.loads(message)
        return answer

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.process.wait(10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)


@pytest.fixture
def tracking_db_url(tmp_path: Path) -> str:
    """The page does not depend on the database kind: SQLite only."""
    return f"sqlite:///{tmp_path / 'tracking.db'}"


@pytest.fixture
def host_app(tracker: Tracker) -> Iterator[str]:
    """The tracking endpoints mounted at /tracking in a Flask app, served on loopback; yields its base URL."""
    app = flask.Flask("host")
    mount_tracking(app, "/tracking", tracker)
    server = serve_in_background(app)
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


PAGE_STATE = """JSON.stringify({
  percent: document.getElementById("percent").textContent, total: document.getElementById("total").textContent,
  state: document.getElementById("state").textContent, complete: document.body.dataset.complete,
  bar: document.getElementById("fill").style.width,
  rows: Object.fromEntries([...document.querySelectorAll("#jobs tr")].map(r => [r.dataset.job, r.dataset.status])),
  counts: Object.fromEntries(["enqueued", "working", "finished", "failed", "error"].map(
    s => [s, Number(document.getElementById("count-" + s).textContent)])),
})"""


def test_the_page_with_a_trailing_slash_polls_to_100_percent_with_a_clean_console(
    config: kiq.Config, tracker: Tracker, host_app: str, tmp_path: Path
) -> None:
    if CHROMIUM is None:
        missing_service("chromium is not installed")
    task_id = tracker.create_task(Enroll, [[n, "fail" if n % 4 == 0 else "ok"] for n in range(8)], name="eight")
    browser = Browser(tmp_path / "profile")
    try:
        browser.call("Page.navigate", url=f"{host_app}/tracking/tasks/{task_id}/page/")

        def state() -> dict[str, Any]:
            shown: dict[str, Any] = json.loads(browser.evaluate(PAGE_STATE) or "{}")
            return shown

        running = wait_until(lambda: (shown := state()).get("total") == "8" and shown, 15, message="the first poll")
        assert (running["state"], running["percent"], running["complete"]) == ("running", "0", "false")
        assert running["counts"]["enqueued"] == 8 and set(running["rows"].values()) == {"enqueued"}

        assert work_off(config) == 8
        tracker.writer.flush()
        final = wait_until(lambda: (shown := state())["complete"] == "true" and shown, 15, message="100 %")
        task = tracker.task(task_id)
        assert task is not None and task["complete"]
        assert (final["state"], final["percent"], final["bar"]) == ("complete", "100", "100%")
        assert final["counts"] == task["counts"]
        assert task["counts"] == {"enqueued": 0, "working": 0, "finished": 6, "failed": 2, "error": 0}
        assert final["rows"] == {event["job_id"]: event["status"] for event in task["events"]}
        assert browser.log == [], "the browser's console shows errors or CSP violations"

        # the console does show a violation when there is one: an image is not allowed by the policy
        browser.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=\"/tracking/x.png\">')")
        wait_until(lambda: browser.evaluate("1") and browser.log, 10, message="the control violation")
        assert browser.log[0]["source"] == "security" and "Content Security Policy" in browser.log[0]["text"]
    finally:
        browser.close()
