"""Iterable jobs on the dashboard, over real HTTP: the Busy page shows each one's run, cursor and runtime (read in one
pipeline) with a Cancel button; the retry and scheduled job pages show its state and the button, the dead job page
only its state; a cancelled job shows it and offers no second Cancel; a bad cancel form changes nothing. (The CSRF
and read-only refusals of the Cancel buttons: test_security.py; a click in a browser: test_iteration_cancel.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

import kiq
from kiq.iteration import state
from tests.jobs.web import SlowExport

from .http_support import add_process, entry_key, failed, job, parse, post_form, private_config

Dashboard = Callable[..., str]
FUTURE = float(int(time.time()) + 86_400)
RUNNING, WAITING, DEAD = "1" * 24, "2" * 24, "3" * 24


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config, on a database of these tests' own (see http_support)."""
    yield from private_config(one_redis_url)


@pytest.fixture
def r(e2e_config: kiq.Config) -> redis.Redis:
    connection = e2e_config.redis
    add_process(connection, "host:1:abc", work={"1": job(RUNNING, "Export"), "2": job("plain-job", "Greet")})
    connection.zadd("retry", {json.dumps(failed(WAITING, "Export")): FUTURE})
    connection.zadd("dead", {json.dumps(failed(DEAD, "Export")): FUTURE - 2 * 86_400})
    for jid in (RUNNING, WAITING, DEAD):
        state.flush(connection, jid, 4, {"row": 12_345, "name": "<b>x</b>"}, 3700.0)
    return connection


def test_the_busy_page_shows_the_state_and_cancels(dashboard: Dashboard, r: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        page = parse(browser.get("/busy").text)
        jids, iteration = page.column("running", 5), page.column("running", 7)
        shown = dict(zip(jids, iteration, strict=True))
        assert shown[RUNNING].startswith('run 4 · cursor {"row": 12345, "name": "<b>x</b>"} · ran 1 h 1 min')
        assert shown["plain-job"] == ""
        form = page.form("/cancel", jid=RUNNING, back="busy")
        assert [f for f in page.post_forms() if f.action == "/cancel"] == [form]  # none for the plain job
        answer = post_form(browser, "/cancel", form.fields)
        assert answer.status_code == 303 and answer.headers["location"] == "/busy"
        after = parse(browser.get("/busy").text)
    cancelled = state.read(r, RUNNING)
    assert cancelled is not None and cancelled.cancelled and cancelled.executions == 4
    assert "cancelled" in dict(zip(after.column("running", 5), after.column("running", 7), strict=True))[RUNNING]
    assert not [f for f in after.post_forms() if f.action == "/cancel"]


def test_job_pages_show_the_state_and_cancel_where_the_job_may_run_again(dashboard: Dashboard, r: redis.Redis) -> None:
    retry_key, dead_key = entry_key(FUTURE, WAITING), entry_key(FUTURE - 2 * 86_400, DEAD)
    with httpx.Client(base_url=dashboard()) as browser:
        retry_page = parse(browser.get(f"/retries/{retry_key}").text)
        assert "Iteration run4" in retry_page.text and '{"row": 12345, "name": "<b>x</b>"}' in retry_page.text
        form = retry_page.form("/cancel", jid=WAITING, back=f"retries/{retry_key}")
        answer = post_form(browser, "/cancel", form.fields)
        assert answer.status_code == 303 and answer.headers["location"] == f"/retries/{retry_key}"
        dead_page = parse(browser.get(f"/dead/{dead_key}").text)
        assert "Iteration run4" in dead_page.text
        assert not [f for f in dead_page.post_forms() if f.action == "/cancel"]
    waiting = state.read(r, WAITING)
    assert waiting is not None and waiting.cancelled


def test_an_iterable_job_that_saved_no_state_yet_can_be_cancelled_by_its_class(
    dashboard: Dashboard, r: redis.Redis
) -> None:
    """No state yet (scheduled; or its first seconds): the Cancel shows when this process registers an IterableJob
    under its class (tests.jobs.web.SlowExport), not for another class."""
    r.zadd("schedule", {json.dumps(job("4" * 24, SlowExport.kiq_name)): FUTURE, json.dumps(job("5" * 24)): FUTURE})
    with httpx.Client(base_url=dashboard()) as browser:
        iterable = parse(browser.get(f"/scheduled/{entry_key(FUTURE, '4' * 24)}").text)
        plain = parse(browser.get(f"/scheduled/{entry_key(FUTURE, '5' * 24)}").text)
    iterable.form("/cancel", jid="4" * 24)
    assert "Iteration run" not in iterable.text
    assert not [form for form in plain.post_forms() if form.action == "/cancel"]


@pytest.mark.parametrize(
    ("jid", "back", "error"),
    [("", "busy", "not a job id"), ("a b", "busy", "not a job id"), (RUNNING, "https://evil.example", "cannot return"),
     (RUNNING, "queues/default", "cannot return")],
)  # fmt: skip
def test_bad_cancel_forms_change_nothing(dashboard: Dashboard, r: redis.Redis, jid: str, back: str, error: str) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        token = parse(browser.get("/busy").text).csrf()
        answer = post_form(browser, "/cancel", [("csrf", token), ("jid", jid), ("back", back)])
    assert answer.status_code == 400 and error in answer.text
    running = state.read(r, RUNNING)
    assert running is not None and not running.cancelled
