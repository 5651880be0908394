"""The workflow plugin's dashboard tab, "Workflows" (``kiq.contrib.web``; see ``kiq.tabs``).

    (first page)    the newest workflows, 25 a page (``workflows()``), their statuses read in one pipelined round trip
    <id>            one workflow: its state, times, result and error; its steps drawn as a graph (a ``Graph``, each
                    node leading to its step) and listed, 50 a page
    <id>/<step>     one step, the job it runs: class, queue, jid and where the dashboard shows that job now (its
                    queue, Retries or Dead, searched by jid), what it waits for, its result and its error

The list reads each listed workflow's whole status (its steps counted): 25 workflows of 10,000 steps is a few MB
from Redis per page. Workflows expire ``workflow_retention`` after their last change: an id listed may be gone by
the time it is read, and is left out of the page. An unknown or malformed id or step answers 404 (``LookupError``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import kiq
import kiq.ext
from kiq.tabs import (
    Cell,
    Code,
    DashboardLink,
    Facts,
    Graph,
    GraphNode,
    Heading,
    Link,
    Pager,
    Tab,
    Table,
    TabRequest,
    TabView,
    When,
)

from .keys import WORKFLOW_ID
from .status import StepStatus, WorkflowStatus, parse, queue_reads, status, workflows

PAGE_SIZE = 25
STEPS_PAGE = 50
RESULT_CHARACTERS = 80  # of a result in a table cell; the step's page shows it whole
COLUMNS = ["Workflow", "State", "Steps done", "Created", "Finished"]
STEP_COLUMNS = ["Step", "Job class", "Queue", "Job", "State", "Result", "Error"]
TONES = {
    "waiting": "neutral",
    "enqueued": "active",
    "succeeded": "good",
    "failed": "bad",  # a retry is pending: the workflow waits for it
    "dead": "bad",
    "skipped": "muted",
}
# where the dashboard shows a step's job, by the step's state (a set's page searched by the jid)
WHERE = {"enqueued": ("its queue", "queues/{queue}"), "failed": ("Retries", "retries"), "dead": ("Dead", "dead")}
SEARCHED = ("retries", "dead")


def workflows_tab(config: kiq.Config) -> Tab:
    """The "workflows" tab on ``config``'s Redis."""
    return Tab("workflows", "Workflows", lambda request: render(config, request))


def render(config: kiq.Config, request: TabRequest) -> TabView:
    if not request.path:
        return workflow_list(config, request)
    workflow_id, _, step = request.path.partition("/")
    if not WORKFLOW_ID.fullmatch(workflow_id):
        raise LookupError(f"not a workflow id: {workflow_id!r:.80}")
    found = status(workflow_id, config)
    if found is None:
        raise LookupError(f"no workflow {workflow_id}: never made, or expired")
    if step:
        return step_page(found, step)
    return workflow_page(found, request.page)


def workflow_list(config: kiq.Config, request: TabRequest) -> TabView:
    page = request.page
    listed = workflows(PAGE_SIZE, str((page - 1) * PAGE_SIZE) if page > 1 else None, config)
    pipe = config.redis.pipeline(transaction=False)
    keys = kiq.ext.keyspace(config.redis)
    for workflow_id in listed.ids:
        queue_reads(pipe, keys, workflow_id)
    replies = pipe.execute() if listed.ids else []
    per = len(replies) // len(listed.ids) if listed.ids else 0
    found = [parse(workflow_id, replies[n * per : (n + 1) * per]) for n, workflow_id in enumerate(listed.ids)]
    rows: list[list[Cell]] = [
        [Link(flow.id, flow.id), flow.state, done(flow), When(flow.created_at), When(flow.finished_at)]
        for flow in found
        if flow is not None
    ]
    table = Table(COLUMNS, rows, empty="No workflows (or none on this page any more: they expired).")
    return TabView("Workflows", [table, Pager(page, listed.cursor is not None)])


def done(flow: WorkflowStatus) -> str:
    """ "3 / 5": steps succeeded of all."""
    return f"{sum(step.state == 'succeeded' for step in flow.steps):,} / {len(flow.steps):,}"


def workflow_page(flow: WorkflowStatus, page: int) -> TabView:
    counts = Counter(step.state for step in flow.steps)
    facts: list[tuple[str, Cell]] = [
        ("Workflow", flow.id),
        ("State", flow.state),
        ("Steps", ", ".join(f"{counts[state]:,} {state}" for state in TONES if counts[state]) or "none"),
        ("Created", When(flow.created_at)),
        ("Finished", When(flow.finished_at)),
    ]
    blocks: list[Any] = []
    if flow.error is not None:
        dead = next((step for step in flow.steps if step.jid == flow.error.get("jid")), None)
        facts.append(("Error", f"{flow.error.get('class')}: {flow.error.get('message')}"))
        facts.append(("Failed at", "–" if dead is None else Link(f"step {dead.step}", f"{flow.id}/{dead.step}")))
    if flow.state == "succeeded":
        facts.append(("Result", cut(shown(flow.result))))
    blocks.append(Facts(facts))
    blocks += [Heading("Graph"), graph(flow)]
    start = (page - 1) * STEPS_PAGE
    rows = [step_row(flow, step) for step in flow.steps[start : start + STEPS_PAGE]]
    blocks += [Heading("Steps"), Table(STEP_COLUMNS, rows, empty="No steps on this page.")]
    if len(flow.steps) > STEPS_PAGE:
        blocks.append(Pager(page, start + STEPS_PAGE < len(flow.steps)))
    if flow.state == "succeeded":
        blocks += [Heading("Result"), Code(pretty(flow.result))]
    return TabView(f"Workflow {flow.id}", blocks)


def graph(flow: WorkflowStatus) -> Graph:
    """The steps as nodes (labelled by job class, its last dotted part: a box is narrow; coloured by state), the
    edges from what each waits for."""
    nodes = [
        GraphNode(step.step, step.job_class.rpartition(".")[2], f"{step.step} · {step.state}",
                  TONES.get(step.state, "neutral"), Link(step.step, f"{flow.id}/{step.step}"))
        for step in flow.steps
    ]  # fmt: skip
    edges = [(before, step.step) for step in flow.steps for before in step.after]
    return Graph(nodes, edges, caption=f"{len(nodes):,} steps, left to right in the order they run")


def step_row(flow: WorkflowStatus, step: StepStatus) -> list[Cell]:
    job: Cell = Link(step.jid, f"{flow.id}/{step.step}") if step.jid else "not pushed"
    result = cut(shown(step.result)) if step.state == "succeeded" else None
    return [Link(step.step, f"{flow.id}/{step.step}"), step.job_class, step.queue, job, step.state, result, step.error]


def step_page(flow: WorkflowStatus, step_id: str) -> TabView:
    try:
        step = flow.step(step_id)
    except KeyError:
        raise LookupError(f"workflow {flow.id} has no step {step_id!r:.80}") from None
    facts: list[tuple[str, Cell]] = [
        ("Workflow", Link(flow.id, flow.id)),
        ("Step", step.step),
        ("Job class", step.job_class),
        ("Queue", step.queue),
        ("Job", step.jid or "not pushed yet"),
        ("State", step.state),
        ("Waits for", ", ".join(step.after) or "nothing: it starts the workflow"),
    ]
    where = WHERE.get(step.state)
    if where is not None and step.jid:
        text, page = where
        query = {"q": step.jid} if page in SEARCHED else {}
        facts.append(("In the dashboard", DashboardLink(text, page.format(queue=step.queue), query)))
    blocks: list[Any] = [Facts(facts)]
    if step.state == "succeeded":
        blocks += [Heading("Result"), Code(pretty(step.result))]
    if step.error:
        blocks += [Heading("Error"), Code(step.error)]
    return TabView(f"Step {step.step} of workflow {flow.id}", blocks)


def shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def cut(text: str) -> str:
    return text if len(text) <= RESULT_CHARACTERS else text[: RESULT_CHARACTERS - 1] + "…"
