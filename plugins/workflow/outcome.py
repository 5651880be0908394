"""A workflow's outcome: ``result(id, wait=)`` answers the value of its last step (a group's list), waiting for
it, as that step's return annotation reads it, or raises ``WorkflowFailed`` / ``WorkflowPending``."""

from __future__ import annotations

import time
from typing import Any

import kiq
import kiq.ext
from kiq.plugins.results.store import pauses  # the same waiting: from 10 ms, doubling up to 0.2 s

from .keys import checked_workflow_id, workflow_key
from .status import WorkflowStatus, status


class WorkflowPending(kiq.KiqError, LookupError):
    """The workflow has not finished yet (or there is no such workflow: never made, or expired)."""


class WorkflowFailed(kiq.KiqError):
    """A step of the workflow died; ``error`` is ``{"jid", "class", "message"}`` of that step."""

    def __init__(self, workflow_id: str, error: dict[str, Any] | None) -> None:
        self.workflow_id = workflow_id
        self.error = error or {}
        super().__init__(
            f"workflow {workflow_id} failed: step job {self.error.get('jid')} ({self.error.get('class')}) died: "
            f"{self.error.get('message')}"
        )


def answer(workflow_id: str, found: WorkflowStatus | None) -> Any:
    if found is None:
        raise WorkflowPending(f"no workflow {workflow_id}: never made here, or expired (see workflow_retention)")
    if found.state == "failed":
        raise WorkflowFailed(workflow_id, found.error)
    if found.state != "succeeded":
        raise WorkflowPending(f"workflow {workflow_id} is still running")
    return typed(found)


def typed(found: WorkflowStatus) -> Any:
    """The workflow's result read as its last steps' return annotation (``kiq.ext.result_value``): a last step's
    value, or a final group's list when its members' last steps are of one class registered here; else the JSON
    form as stored (``status()`` always gives that). Raises ``kiq.ext.ResultTypeError`` naming the type when a
    stored value does not read as it."""
    waited_on = {step for each in found.steps for step in each.after}
    last = [each for each in found.steps if each.step not in waited_on]
    names = {each.job_class for each in last}
    job_class = kiq.registry.find(names.pop()) if len(names) == 1 else None
    if job_class is None:
        return found.result
    if len(last) == 1:
        return kiq.ext.result_value(job_class, found.result)
    if isinstance(found.result, list) and len(found.result) == len(last):
        return [kiq.ext.result_value(job_class, value) for value in found.result]
    return found.result


def result(workflow_id: str, wait: float = 0.0, config: kiq.Config | None = None) -> Any:
    """The result of workflow ``workflow_id``: its last step's value (a list for a group, in its order). ``wait``:
    seconds to wait for it to finish. Raises ``WorkflowPending`` if it has not (or does not exist), and
    ``WorkflowFailed`` if a step died."""
    redis = (config or kiq.default_config()).redis
    key = workflow_key(kiq.ext.keyspace(redis), checked_workflow_id(workflow_id))
    for pause in pauses(wait):
        if pause is None or redis.hget(key, "state") not in (None, "running"):  # the whole status read once
            return answer(workflow_id, status(workflow_id, config))
        time.sleep(pause)
    raise AssertionError("pauses() ends with None")
