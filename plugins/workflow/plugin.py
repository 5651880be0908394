"""The workflow plugin: its setting and options, its middleware, the deaths and drops that fail a workflow, ``|``
between signatures, ``kiq workflows``, and its metric readings (metrics.py)."""

from __future__ import annotations

import argparse
import threading
from typing import Any

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .canvas import Chain
from .metrics import WorkflowCounts, fleet_readings
from .middleware import WorkflowServerMiddleware, error_text, step_of
from .pieces import compact
from .scripts import Steps
from .web import workflows_tab

DAY = 24 * 60 * 60

SETTINGS = [
    kiq.ext.Setting.integer(
        "workflow_retention",
        7 * DAY,
        minimum=60,
        help="seconds a workflow (its graph, states and results) stays in Redis after its last change; keep it "
        "longer than a step's retries last",
    ),
]
OPTIONS = ["wf", "wf_step", "wf_handler"]


class WorkflowPlugin:
    """``plugins = ["workflow"]`` in the workers that run workflow steps and in the processes that start
    workflows or compose signatures with ``|``. One per config: it holds that config's step program."""

    def __init__(self) -> None:
        self._steps: Steps | None = None
        self._lock = threading.Lock()
        self.counts = WorkflowCounts()

    def steps(self, config: kiq.Config) -> Steps:
        with self._lock:
            if self._steps is None:
                self._steps = Steps(config)
            return self._steps

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return OPTIONS

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(WorkflowServerMiddleware, self)

    @kiq.hookimpl
    def kiq_compose(self, left: kiq.Signature, right: kiq.Signature) -> Chain:
        return Chain(left, right)

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        """A dead step fails its workflow (or, a chord member with ``allow_failures``, gives None)."""
        found = step_of(job)
        if found is not None:
            self.died(config, found, job, error_text(exc, job))

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], reason: str, config: kiq.Config) -> None:
        """A step dropped unrun (e.g. its expiry passed) will never give a result: as if it died."""
        found = step_of(job)
        if found is not None:
            self.died(config, found, job, f"dropped: {reason}")

    def died(self, config: kiq.Config, found: tuple[str, str], job: dict[str, Any], message: str) -> None:
        workflow_id, step = found
        jid = str(job.get("jid"))
        error = {"jid": jid, "class": str(job.get("class")), "message": message}
        handler_input = ",".join(compact(value) for value in (workflow_id, jid, error))
        self.counts.record(
            "died", self.steps(config).run("died", workflow_id, step, message, compact(error), handler_input)
        )

    @kiq.hookimpl
    def kiq_metrics(self, config: kiq.Config, scope: str) -> list[kiq.ext.Reading] | None:
        """This process's steps and workflows finished; the fleet's workflows retained and running (metrics.py)."""
        if scope == "process":
            return self.counts.readings()
        return fleet_readings(config) if scope == "fleet" else None

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        """The "Workflows" tab of the dashboard: the newest workflows, each one's graph and steps (see web.py)."""
        return [workflows_tab(config)]
