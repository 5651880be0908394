"""The workflow plugin's dashboard tab, called as the dashboard calls it (the ``kiq_web_tabs`` hook, then
``tab.render``) on a real Redis, steps run by the real Processor: the newest workflows a page at a time, one workflow
in full (its facts, its graph from the steps' edges, its steps paged), one step with where the dashboard shows its
job, 404 for unknown and malformed ids and steps."""

from __future__ import annotations

from typing import Any

import pytest

import kiq
from kiq.plugins.workflow import WorkflowStatus, chain, chord, group, status
from kiq.plugins.workflow.web import STEP_COLUMNS, STEPS_PAGE
from kiq.tabs import Code, DashboardLink, Facts, Graph, GraphNode, Link, Pager, Table, TabView, When
from tests.jobs.workflow_web import ChargeCard, FetchOrder, PriceItem, Refund, SendReceipt, SumPrices
from tests.support import render_tab

from .conftest import drain

COLUMNS = ["Workflow", "State", "Steps done", "Created", "Finished"]


def render(config: kiq.Config, path: str = "", **query: str) -> TabView:
    return render_tab(config, "workflows", "Workflows", path, **query)


def blocks(view: TabView, kind: type) -> list[Any]:
    return [block for block in view.blocks if isinstance(block, kind)]


def facts(view: TabView) -> dict[str, Any]:
    (found,) = blocks(view, Facts)
    return dict(found.items)


def start_order(order_id: int, pay: bool = True) -> str:
    """Fetch the order, price its items in a chord, sum them; with ``pay``, charge the card (always declined: the
    step dies) and send the receipt (skipped). The workflow's id."""
    steps: list[Any] = [FetchOrder.s(order_id), chord(group(PriceItem.s(n) for n in (1, 2)), SumPrices.s())]
    if pay:
        steps += [ChargeCard.s(), SendReceipt.s()]
    return chain(*steps).perform_async().id


def finished(config: kiq.Config, workflow_id: str) -> WorkflowStatus:
    found = status(workflow_id)
    assert found is not None and found.state != "running"
    return found


def order(config: kiq.Config, order_id: int, pay: bool = True) -> WorkflowStatus:
    """One order (``start_order``) run to its end; its status."""
    workflow_id = start_order(order_id, pay)
    drain(config)
    return finished(config, workflow_id)


def test_the_newest_workflows_a_page_at_a_time(config: kiq.Config) -> None:
    made = [start_order(number, pay=False) for number in range(26)]
    failed_id = start_order(99)
    drain(config)  # one drain for all (each drain's processor holds connections until the test ends)
    failed = finished(config, failed_id)

    first = render(config)
    assert first.title == "Workflows"
    (table,) = blocks(first, Table)
    assert list(table.columns) == COLUMNS
    assert [row[0] for row in table.rows] == [Link(id_, id_) for id_ in [failed.id, *made[:-25:-1]]]
    assert table.rows[0] == [
        Link(failed.id, failed.id), "failed", f"4 / {len(failed.steps)}", When(failed.created_at),
        When(failed.finished_at),
    ]  # fmt: skip
    assert table.rows[1][1:3] == ["succeeded", "4 / 4"]
    assert blocks(first, Pager) == [Pager(1, True)]

    second = render(config, page="2")
    assert [row[0] for row in blocks(second, Table)[0].rows] == [Link(id_, id_) for id_ in made[1::-1]]
    assert blocks(second, Pager) == [Pager(2, False)]


def test_a_failed_workflow_in_full_with_its_graph(config: kiq.Config) -> None:
    flow = order(config, 7)
    by_class = {step.job_class: step for step in flow.steps}
    dead = by_class["ChargeCard"]
    assert dead.state == "dead" and by_class["SendReceipt"].state == "skipped"

    view = render(config, flow.id)
    assert view.title == f"Workflow {flow.id}"
    shown = facts(view)
    assert shown["State"] == "failed"
    assert shown["Steps"] == "4 succeeded, 1 dead, 1 skipped"
    assert shown["Created"] == When(flow.created_at) and shown["Finished"] == When(flow.finished_at)
    assert "card declined for 44 EUR" in shown["Error"]  # 10 + 7 + 20 + 7
    assert shown["Failed at"] == Link(f"step {dead.step}", f"{flow.id}/{dead.step}")
    assert "Result" not in shown

    (graph,) = blocks(view, Graph)
    tones = {"succeeded": "good", "dead": "bad", "skipped": "muted"}
    assert list(graph.nodes) == [
        GraphNode(step.step, step.job_class, f"{step.step} · {step.state}", tones[step.state],
                  Link(step.step, f"{flow.id}/{step.step}"))
        for step in flow.steps
    ]  # fmt: skip
    assert sorted(graph.edges) == sorted((before, step.step) for step in flow.steps for before in step.after)
    columns = graph.columns()  # fetch, then the two prices side by side, their sum, the charge, the receipt
    price_columns = {columns[step.step] for step in flow.steps if step.job_class == "PriceItem"}
    assert [columns[by_class[name].step] for name in ("FetchOrder", "SumPrices", "ChargeCard", "SendReceipt")] == [
        0, 2, 3, 4
    ]  # fmt: skip
    assert price_columns == {1}

    (table,) = blocks(view, Table)
    assert list(table.columns) == STEP_COLUMNS
    assert [row[0] for row in table.rows] == [Link(step.step, f"{flow.id}/{step.step}") for step in flow.steps]
    fetch = by_class["FetchOrder"]
    assert fetch.jid is not None
    page = f"{flow.id}/{fetch.step}"
    assert table.rows[0] == [
        Link(fetch.step, page), "FetchOrder", "default", Link(fetch.jid, page), "succeeded", '{"order": 7, "items": 3}',
        None,
    ]  # fmt: skip
    receipt_row = table.rows[[step.job_class for step in flow.steps].index("SendReceipt")]
    assert receipt_row[3:6] == ["not pushed", "skipped", None]
    assert blocks(view, Pager) == [] and blocks(view, Code) == []


def test_a_succeeded_workflow_shows_its_result(config: kiq.Config) -> None:
    flow = order(config, 5, pay=False)
    view = render(config, flow.id)
    assert flow.result == 10 + 5 + 20 + 5
    assert facts(view)["Result"] == "40" and "Error" not in facts(view)
    assert blocks(view, Code) == [Code("40")]


def test_a_step_s_page_says_where_its_job_is(config: kiq.Config) -> None:
    flow = order(config, 7)
    by_class = {step.job_class: step for step in flow.steps}
    dead, fetch, receipt = by_class["ChargeCard"], by_class["FetchOrder"], by_class["SendReceipt"]
    assert dead.jid is not None

    view = render(config, f"{flow.id}/{dead.step}")
    assert view.title == f"Step {dead.step} of workflow {flow.id}"
    assert facts(view) == {
        "Workflow": Link(flow.id, flow.id),
        "Step": dead.step,
        "Job class": "ChargeCard",
        "Queue": "default",
        "Job": dead.jid,
        "State": "dead",
        "Waits for": ", ".join(dead.after),
        "In the dashboard": DashboardLink("Dead", "dead", {"q": dead.jid}),
    }
    assert dead.error is not None and blocks(view, Code) == [Code(dead.error)]

    fetched = render(config, f"{flow.id}/{fetch.step}")
    assert facts(fetched)["Waits for"] == "nothing: it starts the workflow"
    assert "In the dashboard" not in facts(fetched)
    assert blocks(fetched, Code) == [Code('{\n  "order": 7,\n  "items": 3\n}')]
    assert facts(render(config, f"{flow.id}/{receipt.step}"))["Job"] == "not pushed yet"


def test_a_big_workflow_s_steps_are_paged(config: kiq.Config) -> None:
    workflow = chord(group(PriceItem.s({"order": 1}, n) for n in range(STEPS_PAGE + 5)), SumPrices.s()).perform_async()
    view = render(config, workflow.id)
    (table,) = blocks(view, Table)
    assert len(table.rows) == STEPS_PAGE and blocks(view, Pager) == [Pager(1, True)]
    assert [row[4] for row in table.rows] == ["enqueued"] * STEPS_PAGE  # nothing ran yet
    last = render(config, workflow.id, page="2")
    assert len(blocks(last, Table)[0].rows) == 6 and blocks(last, Pager) == [Pager(2, False)]
    assert facts(view)["Steps"] == f"1 waiting, {STEPS_PAGE + 5} enqueued"


@pytest.mark.parametrize("path", ["no-such-workflow", "not an id", "x" * 65, "../kiq:workflows", "{id}/99", "{id}/"])
def test_unknown_or_malformed_ids_and_steps_are_not_found(config: kiq.Config, path: str) -> None:
    flow = order(config, 1, pay=False)
    assert facts(render(config, flow.id))["State"] == "succeeded"
    if path == "{id}/":
        assert render(config, path.format(id=flow.id)).title == f"Workflow {flow.id}"  # the workflow's own page
        return
    with pytest.raises(LookupError):
        render(config, path.format(id=flow.id))


def test_a_dotted_job_class_is_drawn_by_its_last_part_and_listed_whole(config: kiq.Config) -> None:
    workflow = chain(SumPrices.s([1, 2]), Refund.s()).perform_async()
    view = render(config, workflow.id)
    (graph,) = blocks(view, Graph)
    assert [node.label for node in graph.nodes] == ["SumPrices", "Refund"]
    assert [row[1] for row in blocks(view, Table)[0].rows] == ["SumPrices", "shop.billing.Refund"]
