"""What a workflow is at, read from Redis in one round trip (a MULTI, so the states are of one instant):
``status(id)``, ``workflows()`` for the newest ids, and the same reads for asyncio code (``aio``).

This is the read contract the dashboard tab, the CLI, ``GET /workflows/<id>`` and the bench use: fields may be
added, none renamed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import kiq
import kiq.ext

from .keys import checked_workflow_id, index_key, workflow_key
from .shape import Shape, resolve

FIELDS = ("state", "created_at", "finished_at", "error", "result")
STATES = ("running", "succeeded", "failed")
STEP_STATES = ("waiting", "enqueued", "succeeded", "failed", "dead", "skipped")


@dataclass(frozen=True)
class StepStatus:
    """One step: ``step`` is its id in the workflow ("0", "1.2": its place in the canvas), ``after`` the steps it
    waits for (the graph's edges). ``state``: waiting (not pushed yet), enqueued (pushed: queued or running),
    succeeded, failed (its last attempt raised and a retry is pending; ``error`` says why), dead, or skipped (it
    will never run: the workflow failed first). ``jid`` is None until the step is pushed."""

    step: str
    job_class: str
    queue: str
    jid: str | None
    state: str
    result: Any
    error: str | None
    after: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class WorkflowStatus:
    """A workflow: ``state`` running, succeeded or failed; ``result`` the last step's value (a group's list) once
    it succeeded; ``error`` ``{"jid", "class", "message"}`` of the step whose death failed it."""

    id: str
    state: str
    created_at: float
    finished_at: float | None
    steps: list[StepStatus]
    result: Any
    error: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def step(self, step: str) -> StepStatus:
        """The step with id ``step``; KeyError naming it when there is none."""
        for found in self.steps:
            if found.step == step:
                return found
        raise KeyError(f"workflow {self.id} has no step {step!r}")


@dataclass(frozen=True)
class WorkflowPage:
    """A page of ``workflows()``: ids newest first, and the cursor of the next page (None: this is the last)."""

    ids: list[str]
    cursor: str | None


def queue_reads(pipe: Any, keys: kiq.ext.Keyspace, workflow_id: str) -> None:
    """Queue on ``pipe`` (sync or asyncio, of a Redis whose keyspace is ``keys``) the reads of one workflow; ``parse``
    makes its status of the replies."""
    pipe.hmget(workflow_key(keys, workflow_id), *FIELDS)
    for part in ("steps", "state", "result", "error"):
        pipe.hgetall(workflow_key(keys, workflow_id, part))


def parse(workflow_id: str, replies: list[Any]) -> WorkflowStatus | None:
    """The status of ``workflow_id`` from the replies of ``queue_reads``; None when it does not exist (expired)."""
    (state, created_at, finished_at, error, shape), steps, states, results, errors = replies
    if created_at is None:
        return None
    values = {str(step): kiq.ext.loads(text) for step, text in results.items()}
    return WorkflowStatus(
        id=workflow_id,
        state=str(state),
        created_at=float(created_at),
        finished_at=None if finished_at is None else float(finished_at),
        steps=sorted(
            (_step(str(step), kiq.ext.loads(text), state, states, values, errors) for step, text in steps.items()),
            key=lambda found: _order(found.step),
        ),
        result=resolve(_shape(shape), values) if state == "succeeded" else None,
        error=None if error is None else kiq.ext.loads(error),
    )


def _shape(text: str | None) -> Shape:
    return "" if text is None else kiq.ext.loads(text)


def _step(
    step: str,
    graph: dict[str, Any],
    workflow_state: str,
    states: dict[str, str],
    values: dict[str, Any],
    errors: dict[str, str],
) -> StepStatus:
    state = states.get(step) or ("skipped" if workflow_state == "failed" else "waiting")
    return StepStatus(
        step=step,
        job_class=str(graph["class"]),
        queue=str(graph["queue"]),
        jid=None if state in ("waiting", "skipped") else str(graph["jid"]),
        state=state,
        result=values.get(step),
        error=errors.get(step),
        after=list(graph["after"]),
    )


def _order(step: str) -> list[int]:
    return [int(part) for part in step.split(".")]


def status(workflow_id: str, config: kiq.Config | None = None) -> WorkflowStatus | None:
    """The status of workflow ``workflow_id``, or None if there is no such workflow (never made, or expired)."""
    redis = (config or kiq.default_config()).redis
    pipe = redis.pipeline(transaction=True)
    queue_reads(pipe, kiq.ext.keyspace(redis), checked_workflow_id(workflow_id))
    return parse(workflow_id, pipe.execute())


def page_range(cursor: str | None, limit: int) -> tuple[int, int]:
    """The index range of a page in the newest-first index."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if cursor is not None and not cursor.isdigit():
        raise ValueError(f"not a workflows() cursor: {cursor!r:.80}; pass the cursor of the previous page")
    start = int(cursor or 0)
    return start, start + limit - 1


def page(start: int, limit: int, ids: list[Any]) -> WorkflowPage:
    return WorkflowPage([str(found) for found in ids], str(start + limit) if len(ids) == limit else None)


def workflows(limit: int = 50, cursor: str | None = None, config: kiq.Config | None = None) -> WorkflowPage:
    """The ids of the newest workflows, newest first, ``limit`` a page; pass the page's ``cursor`` for the next.
    Each start drops the ids older than ``workflow_retention`` from the index; an id listed may still be gone (its
    ``status`` is None) when it expired sooner."""
    start, stop = page_range(cursor, limit)
    redis = (config or kiq.default_config()).redis
    return page(start, limit, redis.zrevrange(index_key(kiq.ext.keyspace(redis)), start, stop))
