"""Workflows in real ``kiq worker`` processes: 200 chords of 10 members and 200 chains of 5 steps on 3 workers
with reliable fetch under 4 SIGKILLs, 12 in ``make soak`` (every body once, with its members' results in order;
every chain's fold; no step lost); a dying member fails its workflow (on_error once, no body); async steps."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import kiq
from kiq.plugins import workflow
from kiq.plugins.workflow import chord, group
from tests.jobs.workflow import BODIES, HANDLED, REDELIVERED, RUNS, Add, AsyncDouble, Boom, Collect, Const, Handler, Mul
from tests.support import FAST, WorkerProcess, kill_counts, wait_until
from tests.swarm_support import VictimSwarm

from .conftest import RELIABLE_ENV

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.workflow", "-q", "default", "-c", "4")
ENV = {**FAST, "KIQ_PLUGINS": "workflow"}
RELIABLE_ARGS = (*ARGS, "--fetch", "reliable")


@pytest.fixture
def config(e2e_workflow_config: kiq.Config) -> kiq.Config:
    return e2e_workflow_config


STEPS = 200 * 11 + 200 * 5  # the chords' and the chains'


def fold(start: int) -> int:
    """What the chain of ``chain_of(start)`` ends with."""
    return ((start + 1) * 2 + 3) * 5


def chain_of(start: int) -> workflow.Chain:
    return Add.s(start, 1, ms=20) | Mul.s(2) | Add.s(3, ms=20) | Mul.s(5) | Add.s(0)


def finished(ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        return all(workflow.status(i).state != "running" for i in ids)  # type: ignore[union-attr]

    return check


@kill_counts(4, 12)
def test_200_chords_and_200_chains_under_sigkills_push_each_step_once(
    config: kiq.Config, start_worker_process: StartWorker, kills: int
) -> None:
    r = config.redis
    chords = [
        chord(group(Const.s(n * 100 + m, ms=40) for m in range(10)), Collect.s()).perform_async() for n in range(200)
    ]
    chains = [chain_of(n).perform_async() for n in range(200)]
    # 3 workers, the children of one swarm: the parent starts a new one in place of each killed
    swarm = VictimSwarm(start_worker_process, r, 3, *RELIABLE_ARGS, **RELIABLE_ENV)
    swarm.ready()
    unrun_at_kills = []
    for _ in range(kills):
        wait_until(lambda: r.hlen(RUNS) > 0, message="steps to run")
        time.sleep(0.6)  # pacing the chaos, not timing anything asserted
        unrun_at_kills.append(STEPS - r.hlen(RUNS))
        swarm.kill(until=swarm.busy)  # SIGKILL, a child with steps in flight
    assert all(unrun > 0 for unrun in unrun_at_kills), unrun_at_kills  # every kill came mid-run
    wait_until(finished([wf.id for wf in chords + chains]), 120, interval=0.3, message="every workflow to finish")
    swarm.stop()
    assert swarm.deaths() == kills

    bodies = [json.loads(raw) for raw in r.lrange(BODIES, 0, -1)]
    assert {body["wf"] for body in bodies} == {wf.id for wf in chords}
    for n, wf in enumerate(chords):
        runs_of_body = [body for body in bodies if body["wf"] == wf.id]
        # pushed once: every run has the one push's enqueued_at; a second run is only a redelivery (its worker was
        # killed while it ran), which reliable fetch counts
        assert len({body["enqueued_at"] for body in runs_of_body}) == 1
        assert all(body["interrupted"] > 0 for body in runs_of_body[1:])
        assert all(body["results"] == [n * 100 + m for m in range(10)] for body in runs_of_body)
        assert wf.result() == [n * 100 + m for m in range(10)]
    assert [wf.result() for wf in chains] == [fold(n) for n in range(200)]
    runs = {name: int(count) for name, count in r.hgetall(RUNS).items()}
    assert len(runs) == STEPS  # no step lost
    redelivered = r.scard(REDELIVERED)
    assert redelivered > 0  # the kills took steps in flight, which ran again
    print(
        f"\n{kills} SIGKILLs: {redelivered} steps redelivered, "
        f"{sum(runs.values()) - len(runs)} of them ran to the end twice"
    )


def test_a_dying_member_runs_on_error_once_and_never_the_body(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    canvas = chord([Const.s(1), Boom.s(), Const.s(3, ms=300), Boom.s()], Collect.s()) | Const.s()
    wf = canvas.on_error(Handler.s("note")).perform_async()
    start_worker(*ARGS, env=ENV)
    wait_until(finished([wf.id]), 30, message="the workflow to fail")
    wait_until(lambda: r.llen(HANDLED) > 0, 30, message="the handler to run")
    time.sleep(0.5)  # a second handler run, if there were one, would show by now
    assert r.llen(HANDLED) == 1
    found = workflow.status(wf.id)
    assert found is not None and found.state == "failed"
    assert found.error is not None and found.error["class"] == "WfBoom" and "ValueError: boom" in found.error["message"]
    handled = json.loads(r.lindex(HANDLED, 0))["args"]
    assert handled == [wf.id, found.error["jid"], found.error, "note"]
    assert r.llen(BODIES) == 0
    states = {step.step: step.state for step in found.steps}
    # a member that started after the workflow failed is skipped; one running then is recorded all the same
    assert "dead" in (states["0.0.1"], states["0.0.3"])
    assert {states["0.0.1"], states["0.0.3"]} <= {"dead", "skipped"}
    assert {states["0.0.0"], states["0.0.2"]} <= {"succeeded", "skipped"}
    assert states["0.1"] == states["1"] == "skipped"
    with pytest.raises(workflow.WorkflowFailed, match="boom"):
        wf.result()


def test_async_steps_in_a_worker(config: kiq.Config, start_worker: StartWorker) -> None:
    wf = (Const.si(3) | AsyncDouble.s() | group(AsyncDouble.s(), Add.s(1)) | Collect.s()).perform_async()
    start_worker(*ARGS, env=ENV)
    assert wf.result(wait=30) == [12, 7]
