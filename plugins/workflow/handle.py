"""The handle a started workflow returns: ``wf.id``, ``wf.status()``, ``wf.result(wait=5)`` and their ``aio``
forms."""

from __future__ import annotations

from typing import Any

import kiq

from . import aio as aio_reads
from .outcome import result
from .status import WorkflowStatus, status


class Workflow:
    """A started workflow, by id; ``Workflow(id)`` makes a handle of an id kept elsewhere."""

    def __init__(self, workflow_id: str, config: kiq.Config | None = None) -> None:
        self.id = workflow_id
        self.config = config

    def status(self) -> WorkflowStatus | None:
        return status(self.id, self.config)

    def result(self, wait: float = 0.0) -> Any:
        """The last step's value (a group's list); see ``kiq.plugins.workflow.result``."""
        return result(self.id, wait, self.config)

    @property
    def aio(self) -> AsyncWorkflow:
        return AsyncWorkflow(self)

    def __repr__(self) -> str:
        return f"Workflow({self.id!r})"


class AsyncWorkflow:
    """A workflow handle's reads for asyncio code: ``await wf.aio.result(wait=5)``."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow

    async def status(self) -> WorkflowStatus | None:
        return await aio_reads.status(self.workflow.id, self.workflow.config)

    async def result(self, wait: float = 0.0) -> Any:
        return await aio_reads.result(self.workflow.id, wait, self.workflow.config)
