"""Workflows: jobs in chains, groups and chords, each step given the result of the one before, every successor
pushed exactly once (Celery's canvas, on plain Redis, through kill -9).

    from kiq.plugins.workflow import chain, chord, group

    wf = (Fetch.s(url) | Parse.s() | group(Store.s(), Index.s()) | Notify.s()).perform_async()
    wf.result(wait=30)                                 # the last step's value
    workflow.status(wf.id)                             # every step: state, jid, result, error, after

Enable it with ``plugins = ["workflow"]`` in the workers and in the processes that start workflows.
``kiq workflows`` lists them. See docs/plugins/workflow.md.
"""

from __future__ import annotations

from . import aio
from .canvas import Chain, Chord, Group, chain, chord, group
from .errors import WorkflowError
from .handle import AsyncWorkflow, Workflow
from .outcome import WorkflowFailed, WorkflowPending, result
from .plugin import WorkflowPlugin
from .status import StepStatus, WorkflowPage, WorkflowStatus, status, workflows

__all__ = [
    "AsyncWorkflow",
    "Chain",
    "Chord",
    "Group",
    "StepStatus",
    "Workflow",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowPage",
    "WorkflowPending",
    "WorkflowPlugin",
    "WorkflowStatus",
    "aio",
    "chain",
    "chord",
    "group",
    "result",
    "status",
    "workflows",
]
