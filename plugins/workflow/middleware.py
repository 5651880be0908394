"""The workflow's server middleware: a step records its outcome (``scripts.py``) before it is acknowledged, and a
step of a workflow that failed (or a step run again after it succeeded) is not run.

What other producers or Redis can do to a step is handled here too: a payload whose workflow fields are unusable
(wrong types, a step the workflow does not have) goes to the dead set with the reason, unrun; a result that is not
strict JSON (after its return annotation's conversion, kiq.ext.result_form) kills the step (running it again would
return the same), which fails its workflow; and an outcome Redis refuses (an outage, maxmemory) is held by the
worker (``kiq.ext.hold_write``) with the job unacknowledged, and written once Redis takes it, so the successor is
pushed then, once."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext
from kiq.api import DeadSet

from .errors import WorkflowError
from .keys import WORKFLOW_ID, workflow_key

if TYPE_CHECKING:
    from .plugin import WorkflowPlugin

log = logging.getLogger("kiq.workflow")

STEP_ID = re.compile(r"\d+(?:\.\d+)*")  # a place in the canvas: "0", "1.2.0"


def step_of(job: dict[str, Any]) -> tuple[str, str] | None:
    """``(workflow id, step id)`` of a workflow step's payload, else None."""
    workflow_id, step = job.get("wf"), job.get("wf_step")
    return (workflow_id, step) if isinstance(workflow_id, str) and isinstance(step, str) else None


def unusable(job: dict[str, Any]) -> str | None:
    """Why the workflow fields of ``job`` cannot be a step's (another producer wrote them), or None."""
    if "wf" not in job and "wf_step" not in job:
        return None
    workflow_id, step = job.get("wf"), job.get("wf_step")
    if not isinstance(workflow_id, str) or not WORKFLOW_ID.fullmatch(workflow_id):
        return f"its workflow field wf={workflow_id!r:.80} is not a workflow id"
    if not isinstance(step, str) or len(step) > 4096 or not STEP_ID.fullmatch(step):
        return f'its workflow field wf_step={step!r:.80} is not a step id (a text such as "0" or "1.2")'
    return None


def error_text(exc: BaseException | None, job: dict[str, Any]) -> str:
    """A step's error as its status and on_error handler get it: bounded (10,000 characters), never raising."""
    if exc is None:
        return kiq.ext.error_message(Exception(job.get("error_message") or "killed"))
    return f"{kiq.ext.error_class(exc)}: {kiq.ext.error_message(exc)}"


def result_text(value: Any, job: dict[str, Any], job_class: type) -> str:
    """The step's value as the JSON text its successors get: its JSON form by its return annotation (a successor's
    annotated parameter reads it back as that type); a value that is not strict JSON (or not the annotated type)
    fails the step. Only ``WorkflowError`` leaves it: a 5,000-deep list (``RecursionError``) is named in a few
    characters, not retried."""
    try:
        value = kiq.ext.result_form(job_class, value)
    except Exception as error:  # ResultTypeError, or a converter failing on a value too deep: named, bounded
        raise WorkflowError(f"workflow step {job.get('wf_step')}: {kiq.ext.error_message(error, 1000)}") from None
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        text.encode()  # a lone surrogate has no UTF-8 form: neither Redis nor Ruby could take it
        return text
    except Exception as error:
        raise WorkflowError(
            f"workflow step {job.get('wf_step')} ({job.get('class')}) returned {kiq.ext.describe(value, 80)}, which "
            f"is not strict JSON ({type(error).__name__}: {kiq.ext.error_message(error, 200)}); a step's result goes "
            "to the steps after it: return str, int, float, bool, None, list or dict, or annotate perform's return "
            "type (e.g. -> Decimal) to pass a Decimal, datetime, UUID, dataclass..."
        ) from None


class WorkflowServerMiddleware(kiq.ServerMiddleware):
    def __init__(self, plugin: WorkflowPlugin) -> None:
        self.plugin = plugin

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        problem = unusable(job)
        if problem is not None:
            self.bury(job, problem)
            return
        found = step_of(job)
        if found is None:
            yield
            return
        workflow_id, step = found
        steps = self.plugin.steps(self.config)
        pipe = self.config.redis.pipeline(transaction=False)
        keys = steps.keyspace
        pipe.hget(workflow_key(keys, workflow_id), "state")
        pipe.hget(workflow_key(keys, workflow_id, "state"), step)
        pipe.hexists(workflow_key(keys, workflow_id, "steps"), step)
        try:
            state, current, known = pipe.execute()
        except kiq.ext.TRANSIENT:  # these reads only spare a run: the step script decides once Redis is back
            state, current, known = "running", None, True
        if state == "failed":  # the workflow is over: its remaining steps never run
            self.plugin.counts.record("skipped", steps.run("skipped", workflow_id, step))
            return
        if current in ("succeeded", "dead"):  # a second delivery of a step whose outcome is recorded
            log.info("workflow %s step %s: already %s, not run again", workflow_id, step, current)
            return
        if state is not None and not known:
            self.bury(
                job,
                f"its workflow field wf_step={step!r:.80} names no step of workflow {workflow_id} (or the "
                f"workflow's graph expired: workflow_retention)",
            )
            return
        try:
            value = yield
        except kiq.Shutdown:
            raise  # requeued: it runs again
        except Exception as exc:
            try:
                steps.run("failed", workflow_id, step, error_text(exc, job))
            except kiq.ext.TRANSIENT:  # the status only, and the worker logs the outage once
                log.debug("workflow %s step %s: the failure's status not recorded", workflow_id, step, exc_info=True)
            except Exception:  # the status only: the job's own error is the one to raise
                log.warning("workflow %s step %s: could not record the failure", workflow_id, step, exc_info=True)
            raise
        try:
            text = result_text(value, job, type(job_instance))
        except WorkflowError as error:  # the same value every run: the step dies now, failing its workflow
            log.error("%s", error)
            kiq.ext.report_failure(f"WorkflowError: {error}")
            self.plugin.died(self.config, found, job, f"WorkflowError: {error}")
            return

        def succeed() -> None:
            self.plugin.counts.record("succeeded", steps.run("succeeded", workflow_id, step, text))

        try:
            succeed()
        except kiq.ext.TRANSIENT as refusal:
            self.hold(succeed, job, refusal)
        except Exception as bug:  # the step program's own error (e.g. a graph another hand corrupted), not the job's:
            # its retries would meet it again, so the step ends now, in the dead set with the reason
            problem = f"recording its result failed: {kiq.ext.error_class(bug)}: {kiq.ext.error_message(bug, 500)}"
            self.bury(job, problem)

    def hold(self, write: Callable[[], None], job: dict[str, Any], refusal: BaseException) -> None:
        """Redis refused the step's outcome: the worker writes it once Redis takes it (``kiq.ext.hold_write``), and only
        then is the job acknowledged (with reliable fetch a kill meanwhile runs the step again, and the step script
        pushes its successors once). Outside a worker (nothing holds it) the refusal is the job's error."""
        release = kiq.ext.hold_acknowledgement()
        if release is None:
            raise refusal

        def write_then_acknowledge() -> None:
            write()
            release()

        what = "the workflow step's outcome was not recorded (its successors were not pushed)"
        if not kiq.ext.hold_write(write_then_acknowledge, refusal, config=self.config, what=what, job=job):
            release()
            raise refusal

    def bury(self, job: dict[str, Any], problem: str) -> None:
        """A payload that cannot be a workflow step: into the dead set with the reason, unrun."""
        message = (
            f"{job.get('class')} jid={job.get('jid')} cannot run as a workflow step: {problem}; its payload was "
            "written or changed outside kiq's workflow plugin (another producer, a hand edit), or its workflow "
            "expired: start the workflow again with kiq.plugins.workflow"
        )
        log.error("%s", message)
        failed_at = kiq.ext.wire_time(time.time(), self.config.sidekiq_wire)
        dead = {**job, "error_class": "WorkflowError", "error_message": message, "failed_at": failed_at}
        DeadSet(self.config).kill(kiq.ext.dumps(dead), exc=WorkflowError(message))
        kiq.ext.report_failure(f"WorkflowError: {message}")
