"""The workflow plugin's metric readings (the ``kiq_metrics`` hook).

- Process scope: ``kiq_workflow_steps_finished_total{state}`` (the steps whose outcome this process recorded:
  ``succeeded``, ``dead``, ``skipped``) and ``kiq_workflows_finished_total{state}`` (the workflows whose end this
  process recorded: ``succeeded``, ``failed``). Counted from what the step program answers (``scripts.py``), so no
  Redis call is added; each workflow ends once, in the one process whose run ended it. The labels are these fixed
  words.
- Fleet scope: ``kiq_workflows_retained`` (the workflows the index ``kiq:workflows`` holds within
  ``workflow_retention``: one ``ZCOUNT``) and ``kiq_workflows_running`` (those still running among the newest
  ``MAX_EXAMINED``: one ``HGET`` each, pipelined; an expired one is not counted).
"""

from __future__ import annotations

import threading
import time

import kiq
import kiq.ext

from .keys import index_key, workflow_key
from .scripts import UNCHANGED, WORKFLOW_FAILED, WORKFLOW_SUCCEEDED

MAX_EXAMINED = 10_000
STEP_STATES = ("succeeded", "dead", "skipped")
WORKFLOW_STATES = ("succeeded", "failed")
STEP_STATE_OF = {"succeeded": "succeeded", "died": "dead", "skipped": "skipped"}  # step program op -> its state


class WorkflowCounts:
    """This process's counts, from the step program's answers (``record``), by the processor threads at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a step already costs a Redis round trip: a lock is nothing next to it
        self.steps = dict.fromkeys(STEP_STATES, 0)
        self.workflows = dict.fromkeys(WORKFLOW_STATES, 0)

    def record(self, op: str, change: int) -> None:
        """``change``: what the run of ``op`` answered. A run that changed nothing (a redelivery) counts nothing."""
        state = STEP_STATE_OF.get(op)
        if state is None or change == UNCHANGED:
            return
        ended = {WORKFLOW_SUCCEEDED: "succeeded", WORKFLOW_FAILED: "failed"}.get(change)
        with self._lock:
            self.steps[state] += 1
            if ended is not None:
                self.workflows[ended] += 1

    def readings(self) -> list[kiq.ext.Reading]:
        with self._lock:
            steps, workflows = dict(self.steps), dict(self.workflows)
        step_help = "workflow steps whose outcome this process recorded (succeeded, dead, or skipped: never run)"
        workflow_help = "workflows that ended in this process (the step that ended them ran here)"
        return [
            *(kiq.ext.Reading("kiq_workflow_steps_finished_total", count, (("state", state),), "counter", step_help)
              for state, count in steps.items()),
            *(kiq.ext.Reading("kiq_workflows_finished_total", count, (("state", state),), "counter", workflow_help)
              for state, count in workflows.items()),
        ]  # fmt: skip


def fleet_readings(config: kiq.Config) -> list[kiq.ext.Reading]:
    redis = config.redis
    keys = kiq.ext.keyspace(redis)
    since = time.time() - float(config.get("workflow_retention"))
    ids: list[str] = redis.zrevrangebyscore(index_key(keys), "+inf", since, start=0, num=MAX_EXAMINED)  # type: ignore[assignment]
    pipe = redis.pipeline(transaction=False)
    pipe.zcount(index_key(keys), since, "+inf")
    for workflow_id in ids:
        pipe.hget(workflow_key(keys, workflow_id), "state")
    retained, *states = pipe.execute()
    return [
        kiq.ext.Reading(
            "kiq_workflows_retained", retained, help="workflows in Redis (started within workflow_retention)"
        ),
        kiq.ext.Reading(
            "kiq_workflows_running",
            sum(state == "running" for state in states),
            help=f"workflows still running, among the newest {MAX_EXAMINED:,}",
        ),
    ]
