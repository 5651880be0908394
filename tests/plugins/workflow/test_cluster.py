"""Workflows on the real clusters (the ``cluster`` mark's 4 targets: Redis 7 and Valkey 9, both layouts), their
steps run by a real ``kiq worker`` on two queues (in the ``queue`` layout, two slots): a chain, a group and a chord
give their results, a started one from asyncio code too; a dying step runs the on_error handler once; the keys are
all in kiq's shared slot, nothing is left in the schedule (the ``queue`` layout's route for next steps), and the
reads (status, aio, the list, the dashboard tab, the fleet metrics) find them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

import kiq
import kiq.ext
from kiq.plugins import workflow
from kiq.plugins.workflow import aio, chord, group
from kiq.plugins.workflow.metrics import fleet_readings
from kiq.tabs import Table
from tests.cluster_support import CLUSTER_WORKER_ENV, cli, pushed_by_script
from tests.jobs.workflow import HANDLED, RUNS, Add, Boom, Collect, Const, Handler, Mul, Total
from tests.support import WorkerProcess, render_tab, wait_until

pytestmark = pytest.mark.cluster(only=True)

ARGS = ("-r", "tests.jobs.workflow", "-q", "default", "-q", "other", "-c", "4")
ENV = {**CLUSTER_WORKER_ENV, "KIQ_PLUGINS": "workflow"}


def test_a_chain_a_group_and_a_chord_run_to_their_results(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    config = e2e_config
    config.add_plugin("workflow")
    r = config.redis
    keys = kiq.ext.keyspace(r)
    other = {"queue": "other"}
    chained = (Add.s(1, 2) | Mul.s(10).set(**other) | Add.s(5)).perform_async()
    grouped = group(Const.s(n).set(**other) if n % 2 else Const.s(n) for n in range(5)).perform_async()
    chorded = chord(group(Const.s(n) for n in range(1, 11)), Total.s().set(**other)).perform_async()
    started_async = asyncio.run((Const.si(4) | Mul.s(3) | group(Add.s(1), Collect.s())).aio.perform_async())
    failing = (Const.si(1) | Boom.s() | Const.s()).on_error(Handler.s("note")).perform_async()
    start_worker(*ARGS, env=ENV)

    assert chained.result(wait=60) == 35
    assert grouped.result(wait=60) == [0, 1, 2, 3, 4]
    assert chorded.result(wait=60) == 55
    assert asyncio.run(aio.result(started_async.id, wait=60)) == [13, 12]
    wait_until(lambda: r.llen(HANDLED) > 0, 60, message="the on_error handler to run")
    with pytest.raises(workflow.WorkflowFailed, match="boom"):
        failing.result()
    found = workflow.status(failing.id)
    assert found is not None and found.error is not None
    assert json.loads(r.lindex(HANDLED, 0))["args"] == [failing.id, found.error["jid"], found.error, "note"]
    assert r.llen(HANDLED) == 1
    assert max(int(runs) for runs in r.hvals(RUNS)) == 1  # every step ran once

    ids = {chained.id, grouped.id, chorded.id, started_async.id, failing.id}
    assert set(workflow.workflows(config=config).ids) == ids
    assert set(asyncio.run(aio.workflows(config=config)).ids) == ids
    assert {flow["id"] for flow in cli(config, "workflows", plugins="workflow")} == ids
    assert cli(config, "workflows", chained.id, plugins="workflow")["result"] == 35
    status = asyncio.run(aio.status(chorded.id, config))
    assert status is not None and [step.state for step in status.steps] == ["succeeded"] * 11
    (listed,) = [block for block in render_tab(config, "workflows", "Workflows").blocks if isinstance(block, Table)]
    assert len(listed.rows) == 5
    readings = {reading.name: reading.value for reading in fleet_readings(config)}
    assert readings == {"kiq_workflows_retained": 5, "kiq_workflows_running": 0}
    assert r.exists(keys.key(f"kiq:wf:{chorded.id}:result")) == 1
    assert list(r.scan_iter(match="kiq:*")) == []  # no key outside the shared slot's tag
    assert r.zcard(keys.key("schedule")) == 0  # the steps that went through it were pushed


def test_a_next_step_goes_to_its_queue_or_in_the_queue_layout_through_the_schedule(config: kiq.Config) -> None:
    plugin = config.add_plugin(workflow.WorkflowPlugin)
    r = config.redis
    keys = kiq.ext.keyspace(r)
    wf = (Const.si(1) | Add.s(2).set(queue="next")).perform_async()
    assert r.llen(keys.queue("default")) == 1  # the first step, pushed by the start's pipeline
    assert plugin.steps(config).run("succeeded", wf.id, "0", "1") == 1  # as its worker would record it
    job = pushed_by_script(r, "next")
    assert job["args"] == [1, 2] and job["wf_step"] == "1"
