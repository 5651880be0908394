"""The workflow plugin's readings (``kiq_metrics``) in a real worker's ``/metrics``: the steps and workflows that
ended in that process, counted exactly against what the step program recorded in Redis, with labels from a fixed
set; and the fleet's workflows retained and running, read from Redis."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import kiq
from kiq.api.fleet import FleetGauges
from kiq.plugins import workflow
from kiq.plugins.workflow import chord
from tests.jobs.workflow import Add, Boom, Collect, Const, Mul
from tests.plugins.metrics.support import free_port, get, scrape, value
from tests.support import FAST, WorkerProcess, wait_until

STATE_KEY = "kiq:wf:{}:state"  # step id -> the state the step program recorded (plugins/workflow/keys.py)


def fleet(config: kiq.Config) -> dict[str, float]:
    return {reading.name: reading.value for reading in FleetGauges(config).readings() if not reading.labels}


def test_a_worker_counts_the_steps_and_workflows_it_ended_and_the_fleet_those_retained_and_running(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    config = e2e_config  # the process's default config: ``|`` composes with its plugins
    config.add_plugin("workflow")
    r = config.redis
    # an index entry older than workflow_retention: its workflow has expired, it is not counted
    r.zadd("kiq:workflows", {"expired-workflow-id": time.time() - config.get("workflow_retention") - 60})
    chains = [(Add.s(n, 1) | Mul.s(2) | Add.s(3)).perform_async(config) for n in range(5)]
    failing = [chord([Const.s(1), Boom.s(), Const.s(3, ms=300)], Collect.s()).perform_async(config) for _ in range(2)]
    ids = [flow.id for flow in chains + failing]
    assert (fleet(config)["kiq_workflows_retained"], fleet(config)["kiq_workflows_running"]) == (7, 7)

    port = free_port()
    start_worker("-r", "tests.jobs.workflow", "-q", "default", "-c", "4", "--metrics-port", str(port),
                 env={**FAST, "KIQ_PLUGINS": "workflow"})  # fmt: skip
    wait_until(lambda: get(port, "/livez", timeout=2)[0] == 200, 30, message=f"the worker's metrics port {port}")

    def outcomes() -> Counter[str]:
        return Counter(state for i in ids for state in r.hvals(STATE_KEY.format(i)))  # type: ignore[union-attr]

    def ended() -> bool:  # every workflow over, and every step pushed has its outcome (one may run after a death)
        over = all(workflow.status(i, config).state != "running" for i in ids)  # type: ignore[union-attr]
        return over and outcomes()["enqueued"] == 0

    wait_until(ended, 60, message="every workflow to end")
    recorded = outcomes()
    assert recorded["succeeded"] == 5 * 3 + 2 * 2 - recorded["skipped"] and recorded["dead"] == 2

    def counted() -> bool:
        samples = scrape(port)
        return all(
            value(samples, "kiq_workflow_steps_finished_total", state=state) == recorded[state]
            for state in ("succeeded", "dead", "skipped")
        )

    wait_until(counted, 15, message=f"the worker's counts to match {dict(recorded)}")  # a snapshot is 1 s old at most
    samples = scrape(port)
    assert value(samples, "kiq_workflows_finished_total", state="succeeded") == 5
    assert value(samples, "kiq_workflows_finished_total", state="failed") == 2
    assert value(samples, "kiq_workflows_retained") == 7
    assert value(samples, "kiq_workflows_running") == 0
    # bounded labels: the states are fixed words, never a workflow id, a class or a queue
    labels = {found for name, found in samples if name.startswith(("kiq_workflow_", "kiq_workflows_"))}
    states = ("succeeded", "dead", "skipped", "failed")
    assert labels == {frozenset(), *(frozenset({("state", state)}) for state in states)}
