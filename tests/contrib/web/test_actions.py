"""What a user clicks on the dashboard, in headless Chromium, against a real worker: retry a dead job (the worker
runs it), delete one, act on a selection, clear a queue after the confirmation, pause a queue (the worker leaves
it) and unpause it, quiet a worker from the Busy page; a job whose arguments hold markup renders inert; read-only
mode shows no button."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.wait import WebDriverWait

import kiq
from kiq.api import DeadSet, ProcessSet, Queue
from tests.jobs.web import FIXED_KEY, RUNS_KEY, Fragile, Greet
from tests.support import WorkerProcess, wait_until

from .conftest import console_errors

SCRIPT = "<script>document.title='pwned'; alert('pwned')</script><img src=x onerror=\"alert('img')\">"


def dead_jobs(config: kiq.Config, count: int) -> list[str]:
    """``count`` Fragile jobs run by the worker into the dead set; their jids."""
    jids = [Fragile.perform_async(f"fragile {n}") for n in range(count)]
    wait_until(lambda: DeadSet(config).size == count, 30, message="the jobs to die")
    return jids


def click(browser: Any, element: Any, then: Callable[[Any], None] | None = None) -> None:
    """Click ``element`` and wait until the page it was on is replaced (a form's POST and its redirect);
    ``then(browser)`` first answers what the click opened (a confirmation)."""
    page = browser.find_element(By.TAG_NAME, "html")
    element.click()
    if then is not None:
        then(browser)
    # Chromium can answer a question about an element of a page being replaced with "unhandled inspector error"
    # rather than "stale element": that is the navigation under way, so the wait asks again.
    WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(staleness_of(page))


def no_alert(browser: Any) -> bool:
    try:
        _ = browser.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_retry_now_on_a_dead_job_makes_the_worker_run_it_and_delete_removes_one(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    first, second = dead_jobs(e2e_config, 2)
    base = dashboard()
    e2e_config.redis.set(FIXED_KEY, "1")  # the retried run succeeds
    browser.get(f"{base}/dead")
    entry = DeadSet(e2e_config).find_job(first)
    assert entry is not None
    browser.find_element(By.CSS_SELECTOR, f'a[href$="{entry.score!r}-{first}"]').click()
    assert browser.title == "Dead job · kiq"
    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Retry now']"))
    assert browser.current_url == f"{base}/dead"
    wait_until(lambda: e2e_config.redis.lrange(RUNS_KEY, 0, -1) == ["fragile 0"], 20, message="the retried job to run")
    assert [e.jid for e in DeadSet(e2e_config)] == [second]

    entry = DeadSet(e2e_config).find_job(second)
    assert entry is not None
    browser.get(f"{base}/dead/{entry.score!r}-{second}")
    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Delete']"))
    assert DeadSet(e2e_config).size == 0
    assert "No jobs." in browser.find_element(By.TAG_NAME, "main").text
    assert console_errors(browser) == []


def test_a_selection_is_acted_on_and_nothing_else(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    jids = dead_jobs(e2e_config, 4)
    browser.get(f"{dashboard()}/dead")
    boxes = browser.find_elements(By.CSS_SELECTOR, "#entries input[name=key]")
    assert len(boxes) == 4
    for box in boxes[:2]:
        box.click()
    chosen = {box.get_attribute("value").rpartition("-")[2] for box in boxes[:2]}
    click(browser, browser.find_element(By.XPATH, "//button[@value='delete']"))
    assert {entry.jid for entry in DeadSet(e2e_config)} == set(jids) - chosen
    browser.find_element(By.CSS_SELECTOR, "input.select-all").click()
    assert all(box.is_selected() for box in browser.find_elements(By.CSS_SELECTOR, "#entries input[name=key]"))


def test_clearing_a_queue_asks_first(e2e_config: kiq.Config, dashboard: Callable[..., str], browser: Any) -> None:
    for n in range(5):
        Greet.set(queue="mail").perform_async(f"mail {n}")
    browser.get(f"{dashboard()}/queues")
    browser.find_element(By.XPATH, "//button[normalize-space()='Clear']").click()
    browser.switch_to.alert.dismiss()  # "Delete every job in mail?" - no
    assert Queue("mail", e2e_config).size == 5

    def accept(browser: Any) -> None:
        alert = browser.switch_to.alert
        assert alert.text == "Delete every job in mail?"
        alert.accept()

    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Clear']"), accept)
    assert Queue("mail", e2e_config).size == 0
    assert "No queues." in browser.find_element(By.TAG_NAME, "main").text


def test_pause_on_the_queues_page_holds_the_worker_off_the_queue_until_unpause(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    redis = e2e_config.redis
    Greet.perform_async("before")
    wait_until(lambda: redis.lrange(RUNS_KEY, 0, -1) == ["before"], 30, message="the worker to run a job")
    browser.get(f"{dashboard()}/queues")

    def accept(browser: Any) -> None:
        alert = browser.switch_to.alert
        assert alert.text == "Stop the workers taking jobs from default?"
        alert.accept()

    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Pause']"), accept)
    assert Queue("default", e2e_config).paused
    row = browser.find_element(By.CSS_SELECTOR, "#queues tbody tr").text
    assert "paused" in row and "Unpause" in row
    # a pause reaches the workers within a second (a fetch already waiting may still take a job pushed meanwhile):
    # push after that second, then the worker must leave the job alone
    time.sleep(1.0)
    Greet.perform_async("while paused")
    time.sleep(1.5)
    assert redis.lrange(RUNS_KEY, 0, -1) == ["before"] and Queue("default", e2e_config).size == 1

    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Unpause']"))
    assert not Queue("default", e2e_config).paused
    wait_until(lambda: redis.lrange(RUNS_KEY, 0, -1) == ["before", "while paused"], 30, message="the job to run")
    assert console_errors(browser) == []


def test_quiet_on_the_busy_page_quiets_the_worker(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    wait_until(lambda: len(ProcessSet(e2e_config)) == 1, 15, message="the worker's heartbeat")
    browser.get(f"{dashboard()}/busy")
    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Quiet']"))
    wait_until(lambda: next(iter(ProcessSet(e2e_config))).state == "quiet", 10, message="the worker to go quiet")
    wait_until(lambda: "quiet" in web_worker.output().lower(), 5, message="the worker's log to say so")
    browser.refresh()
    assert browser.find_element(By.CSS_SELECTOR, "#processes .state").text == "quiet"
    assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Quiet']")  # not offered twice
    Greet.perform_async("after quiet")
    assert e2e_config.redis.llen(RUNS_KEY) == 0


def test_markup_in_job_arguments_and_errors_renders_inert(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    Fragile.perform_async(SCRIPT)
    wait_until(lambda: DeadSet(e2e_config).size == 1, 30, message="the job to die")
    base = dashboard()
    for path in ("/dead", f"/dead/{next(iter(DeadSet(e2e_config))).score!r}-{next(iter(DeadSet(e2e_config))).jid}"):
        browser.get(base + path)
        assert no_alert(browser)
        assert "pwned" not in browser.title
        assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img")
        assert "<script>document.title='pwned'" in browser.find_element(By.TAG_NAME, "main").text
    assert console_errors(browser) == []


def test_read_only_mode_shows_no_button(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    dead_jobs(e2e_config, 1)
    base = dashboard(read_only=True)
    for path in ("/dead", "/busy", "/queues", "/retries"):
        browser.get(base + path)
        assert browser.find_element(By.CSS_SELECTOR, "header .badge").text == "read-only"
        # no form that changes anything (the filter's GET form stays), no selection
        assert not browser.find_elements(
            By.CSS_SELECTOR, "main form[method=post], main button[form], main input[type=checkbox]"
        )
    browser.find_element(By.LINK_TEXT, "Dead").click()
    browser.find_element(By.CSS_SELECTOR, "#entries td:nth-child(4) a").click()
    assert browser.title == "Dead job · kiq"
    assert not browser.find_elements(By.CSS_SELECTOR, "main button")
    assert "fragile 0" in browser.find_element(By.ID, "payload").text


def test_a_form_posted_without_its_csrf_token_is_refused_and_changes_nothing(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    jid = dead_jobs(e2e_config, 1)[0]
    entry = DeadSet(e2e_config).find_job(jid)
    assert entry is not None
    browser.get(f"{dashboard()}/dead/{entry.score!r}-{jid}")
    browser.execute_script("document.querySelectorAll('input[name=csrf]').forEach((field) => field.remove())")
    click(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Delete']"))
    assert "missing or wrong CSRF token" in browser.find_element(By.TAG_NAME, "body").text
    assert [e.jid for e in DeadSet(e2e_config)] == [jid]


def test_read_only_mode_refuses_a_post_sent_from_the_page(
    e2e_config: kiq.Config, web_worker: WorkerProcess, dashboard: Callable[..., str], browser: Any
) -> None:
    jid = dead_jobs(e2e_config, 1)[0]
    entry = DeadSet(e2e_config).find_job(jid)
    assert entry is not None
    page = f"/dead/{entry.score!r}-{jid}"
    # a valid token: from a writable dashboard on the same host (its cookie goes to every port of 127.0.0.1)
    browser.get(dashboard() + page)
    token = browser.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
    browser.get(dashboard(read_only=True) + page)
    # what the hidden Delete button would send, sent by the page itself (same origin, cookie and token)
    status, text = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(location.pathname, {method: 'POST', body: new URLSearchParams({csrf: arguments[0], op: 'Delete'})})"
        ".then(async (answer) => done([answer.status, await answer.text()]));",
        token,
    )
    assert (status, text) == (403, "the dashboard is read-only")
    assert [e.jid for e in DeadSet(e2e_config)] == [jid]
