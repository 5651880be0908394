"""The workflow plugin's Workflows tab in headless Chromium, with workflows run by a real worker: from the
navigation to the list, into a failed workflow (a chain around a chord, one step dead), its graph drawn with a node
per step in the state the plugin reports, a node leading to its step, the step to its job on the Dead page. With
``KIQ_WEB_SCREENSHOTS=<dir>`` the run also saves the docs' screenshot there
(``KIQ_WEB_SCREENSHOTS=docs/images make pytest PYTEST_ARGS=tests/contrib/web/test_workflow_tab.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from kiq.plugins.workflow import Workflow, chain, chord, group, status
from tests.jobs.workflow_web import ChargeCard, FetchOrder, PriceItem, SendReceipt, SumPrices
from tests.support import FAST, WorkerProcess, wait_until

from .conftest import console_errors

SHOTS = os.environ.get("KIQ_WEB_SCREENSHOTS")
TONES = {"succeeded": "good", "dead": "bad", "skipped": "muted"}


def finished(config: kiq.Config, *workflows: Workflow) -> bool:
    found = [status(workflow.id, config) for workflow in workflows]
    return all(flow is not None and flow.state != "running" for flow in found)


def test_from_the_list_into_a_workflow_and_its_graph(
    e2e_config: kiq.Config,
    start_worker: Callable[..., WorkerProcess],
    dashboard: Callable[..., str],
    browser: Any,
    tmp_path: Path,
) -> None:
    config = kiq.Config(redis_url=e2e_config.redis_url, plugins=["workflow"])
    start_worker("-r", "tests.jobs.workflow_web", "-c", "4", env={**FAST, "KIQ_PLUGINS": "workflow"})
    prices = chord(group(PriceItem.s(item) for item in (1, 2, 3)), SumPrices.s())
    paid = chain(FetchOrder.s(7), prices, ChargeCard.s(), SendReceipt.s()).perform_async(config)
    priced = chord(group(PriceItem.s({"order": 1}, item) for item in range(4)), SumPrices.s()).perform_async(config)
    wait_until(lambda: finished(config, paid, priced), 60, message="both workflows to finish")
    flow = status(paid.id, config)
    assert flow is not None and flow.state == "failed"
    dead = next(step for step in flow.steps if step.state == "dead")
    assert dead.job_class == "ChargeCard" and dead.jid is not None

    browser.get(dashboard(config=config) + "/")
    browser.find_element(By.LINK_TEXT, "Workflows").click()
    assert browser.title == "Workflows · kiq"
    rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")]
    assert len(rows) == 2
    assert rows[0].startswith(f"{priced.id} succeeded 5 / 5") and rows[1].startswith(f"{paid.id} failed 5 / 7")

    browser.find_element(By.LINK_TEXT, paid.id).click()
    assert browser.title == f"Workflow {paid.id} · kiq"
    nodes = browser.find_elements(By.CSS_SELECTOR, "svg.dag g.node")
    assert [(node.get_attribute("data-node"), node.get_attribute("class")) for node in nodes] == [
        (step.step, f"node tone-{TONES[step.state]}") for step in flow.steps
    ]
    labels = [node.find_element(By.CSS_SELECTOR, "text.label").text for node in nodes]
    assert labels == [step.job_class for step in flow.steps]
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.dag .edges path")) == sum(len(s.after) for s in flow.steps)
    # left to right in the order they run: the fetch, the three prices in one column, their sum, the charge
    left = {node.get_attribute("data-node"): node.rect["x"] for node in nodes}
    by_class: dict[str, list[float]] = {}
    for step in flow.steps:
        by_class.setdefault(step.job_class, []).append(left[step.step])
    assert len(set(by_class["PriceItem"])) == 1
    order = ["FetchOrder", "PriceItem", "SumPrices", "ChargeCard", "SendReceipt"]
    assert [by_class[name][0] for name in order] == sorted(by_class[name][0] for name in order)
    assert "card declined for 81 EUR" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    browser.save_screenshot(str(tmp_path / "workflows.png"))
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / "workflows.png"))

    browser.find_element(By.CSS_SELECTOR, f'svg.dag g.node[data-node="{dead.step}"] rect').click()
    assert browser.title == f"Step {dead.step} of workflow {paid.id} · kiq"
    assert dead.jid in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    browser.find_element(By.CSS_SELECTOR, "dl.facts a[href*='dead']").click()  # its job, found by jid on Dead
    assert browser.title == "Dead · kiq"
    assert "ChargeCard" in browser.find_element(By.CSS_SELECTOR, "main table").text
    assert console_errors(browser) == []
