"""The workflow's server middleware: a step records its outcome (``scripts.py``) before it is acknowledged, and a
step of a workflow that failed (or a step run again after it succeeded) is not run."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import kiq

from .errors import WorkflowError
from .keys import workflow_key

if TYPE_CHECKING:
    from .plugin import WorkflowPlugin

log = logging.getLogger("kiq.workflow")


def step_of(job: dict[str, Any]) -> tuple[str, str] | None:
    """``(workflow id, step id)`` of a workflow step's payload, else None."""
    workflow_id, step = job.get("wf"), job.get("wf_step")
    return (workflow_id, step) if isinstance(workflow_id, str) and isinstance(step, str) else None


def error_text(exc: BaseException | None, job: dict[str, Any]) -> str:
    if exc is None:
        return str(job.get("error_message") or "killed")
    return f"{kiq.error_class(exc)}: {exc}"


def result_text(value: Any, job: dict[str, Any]) -> str:
    """The step's value as the JSON text its successors get; a value that is not strict JSON fails the step."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise WorkflowError(
            f"workflow step {job.get('wf_step')} ({job.get('class')}) returned {value!r:.80}, which is not strict "
            f"JSON ({error}); a step's result goes to the steps after it: return str, int, float, bool, None, "
            "list or dict"
        ) from None


class WorkflowServerMiddleware(kiq.ServerMiddleware):
    def __init__(self, plugin: WorkflowPlugin) -> None:
        self.plugin = plugin

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        found = step_of(job)
        if found is None:
            yield
            return
        workflow_id, step = found
        steps = self.plugin.steps(self.config)
        pipe = self.config.redis.pipeline(transaction=False)
        pipe.hget(workflow_key(workflow_id), "state")
        pipe.hget(workflow_key(workflow_id, "state"), step)
        state, current = pipe.execute()
        if state == "failed":  # the workflow is over: its remaining steps never run
            self.plugin.counts.record("skipped", steps.run("skipped", workflow_id, step))
            return
        if current in ("succeeded", "dead"):  # a second delivery of a step whose outcome is recorded
            log.info("workflow %s step %s: already %s, not run again", workflow_id, step, current)
            return
        try:
            value = yield
        except kiq.Shutdown:
            raise  # requeued: it runs again
        except Exception as exc:
            try:
                steps.run("failed", workflow_id, step, error_text(exc, job))
            except Exception:  # the status only: the job's own error is the one to raise
                log.warning("workflow %s step %s: could not record the failure", workflow_id, step, exc_info=True)
            raise
        self.plugin.counts.record("succeeded", steps.run("succeeded", workflow_id, step, result_text(value, job)))
