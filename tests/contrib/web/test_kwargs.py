"""Keyword arguments on the dashboard: next to the arguments in the queue, scheduled, retry and dead listings and on
the Busy page, in their own row on a job's page; as text (escaped like everything from Redis), each cut on its own.
In headless Chromium with a real worker; a ``kwargs`` field from another producer that is not an object, over HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

import kiq
from kiq.api import DeadSet, RetrySet, Workers
from tests.contrib.web.http_support import enqueue, entry_key, failed, job, parse
from tests.jobs.web import Fragile, Greet, Nap
from tests.support import WorkerProcess, wait_until

from .conftest import console_errors
from .test_pages import column, save, text

MARKUP = "<b>bold</b>"


def test_every_listing_shows_kwargs_after_the_args(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    nap = Nap.perform_async(seconds=60)
    Fragile.perform_async(label=f"fragile {MARKUP}")
    Greet.set(queue="later").perform_async(label=f"waiting {MARKUP}")
    long_note = "n" * 300
    enqueue(e2e_config.redis, "later", job("long", args=["a" * 200], kwargs={"note": long_note}))
    Greet.perform_in(3600, label="tomorrow")
    RetrySet(e2e_config).schedule(time.time() + 600, failed("retry", args=[1], kwargs={"attempt": 2}))
    wait_until(lambda: DeadSet(e2e_config).size == 1 and any(w.payload.get("jid") == nap for w in Workers(e2e_config)),
               30, message=f"the jobs to run\n{web_worker.output()}")  # fmt: skip
    base = dashboard()

    browser.get(base + "/busy")
    assert column(browser, "running", 5) == ['[] {"seconds": 60}']

    browser.get(base + "/queues/later")
    assert column(browser, "jobs", 2) == [
        f'["{"a" * 117}… {{"note": "{"n" * 109}…',  # each part cut to 120 on its own: the kwargs still show
        f'[] {{"label": "waiting {MARKUP}"}}',  # the markup as text
    ]
    kwargs_cells = browser.find_elements(By.CSS_SELECTOR, "#jobs code.kwargs")
    assert [cell.text for cell in kwargs_cells][1] == f'{{"label": "waiting {MARKUP}"}}'
    save(browser, tmp_path, "queue-kwargs")

    browser.get(base + "/scheduled")
    assert column(browser, "entries", 5) == ['[] {"label": "tomorrow"}']
    browser.get(base + "/retries")
    assert column(browser, "entries", 5) == ['[1] {"attempt": 2}']

    browser.get(base + "/dead")
    assert column(browser, "entries", 5) == [f'[] {{"label": "fragile {MARKUP}"}}']
    browser.find_element(By.CSS_SELECTOR, "#entries td:nth-child(4) a").click()
    labels = [dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "dl.facts dt")]
    facts = dict(zip(labels, [dd.text for dd in browser.find_elements(By.CSS_SELECTOR, "dl.facts dd")], strict=True))
    assert facts["Arguments"] == "[]"
    assert facts["Keyword arguments"] == f'{{"label": "fragile {MARKUP}"}}'
    assert '"kwargs"' in text(browser, "#payload")
    save(browser, tmp_path, "dead-job-kwargs")
    assert console_errors(browser) == []


@pytest.mark.parametrize("field", ["amount=5", [1, 2], None])
def test_a_kwargs_field_that_is_not_an_object_shows_the_args_only_and_stays_in_the_payload(
    e2e_config: kiq.Config, dashboard: Callable[..., str], field: object
) -> None:
    r = e2e_config.redis
    enqueue(r, "default", job("odd", args=[7], kwargs=field))
    r.zadd("dead", {json.dumps(failed("odd", args=[7], kwargs=field)): 1_700_000_000})
    with httpx.Client(base_url=dashboard()) as client:
        queue = parse(client.get("/queues/default").raise_for_status().text)
        assert queue.column("jobs", 1) == ["[7]"]
        dead = parse(client.get("/dead").raise_for_status().text)
        assert [row[4].text for row in dead.tables["entries"]] == ["[7]"]
        page = client.get(f"/dead/{entry_key(1_700_000_000, 'odd')}").raise_for_status().text
        assert "Keyword arguments" not in page
        assert json.loads(parse(page).texts["pre"][-1])["kwargs"] == field  # the payload, as written


def test_kwargs_names_and_values_are_escaped(e2e_config: kiq.Config, dashboard: Callable[..., str]) -> None:
    kwargs = {"<script>alert(1)</script>": "<img src=x onerror=alert(2)>"}
    r = e2e_config.redis
    enqueue(r, "default", job("hostile", kwargs=kwargs))
    r.zadd("dead", {json.dumps(failed("hostile", kwargs=kwargs)): 1_700_000_000})
    with httpx.Client(base_url=dashboard()) as client:
        for path in ("/queues/default", "/dead", f"/dead/{entry_key(1_700_000_000, 'hostile')}"):
            page = client.get(path).raise_for_status().text
            assert "<script>alert" not in page and "<img src=x" not in page, path
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path
