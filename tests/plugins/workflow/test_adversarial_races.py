"""Workflows against races on real ``kiq worker`` processes: a worker SIGKILLed between a step's end and its
successor's push (reliable fetch runs the step again; the successor is pushed once), and the members of many
small chords ending at the same instant on many threads (each body once), with sync and async steps alike."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
import redis

import kiq
from kiq.plugins import workflow
from kiq.plugins.workflow import chain, chord
from tests.jobs.workflow_adversarial import (
    BODIES,
    ENDED,
    KILL_AFTER,
    RUNS,
    TICKS,
    AsyncMeet,
    AsyncStep,
    Collect,
    Meet,
    Step,
)
from tests.support import InProcessWorker, WorkerProcess, wait_until

from .conftest import RELIABLE_ENV

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.workflow_adversarial", "-q", "default", "--fetch", "reliable")


@pytest.fixture
def config(e2e_workflow_config: kiq.Config) -> kiq.Config:
    return e2e_workflow_config


def finished(flows: list[workflow.Workflow]) -> Callable[[], bool]:
    return lambda: all(workflow.status(wf.id).state != "running" for wf in flows)  # type: ignore[union-attr]


def runs_of(r: redis.Redis, job: str, wf: workflow.Workflow, step: str) -> int:
    return int(r.hget(RUNS, f"{job}:{wf.id}:{step}") or 0)


@pytest.mark.parametrize("step", [Step, AsyncStep], ids=["sync", "async"])
def test_a_worker_killed_between_a_steps_end_and_its_successors_push_pushes_it_once_after_recovery(
    config: kiq.Config,
    start_worker_process: StartWorker,
    start_worker: Callable[..., InProcessWorker],
    step: type[kiq.Job],
) -> None:
    r = config.redis
    flow_chain = chain(step.s(1), step.s(), step.s()).perform_async()
    flow_chord = chord([step.s(10), step.s(20, ms=300)], Collect.s()).perform_async()
    # the chain's first step and the chord's last member to end: each worker dies right after its perform returned
    targets = [(flow_chain, "0", "1"), (flow_chord, "0.1", "1")]
    r.sadd(KILL_AFTER, *(f"{wf.id}:{member}" for wf, member, _ in targets))
    for wf, member, successor in targets:  # a process each (a kill -9), no sibling alive to recover its jobs early
        victim = start_worker_process(*ARGS, "-c", "2", env={**RELIABLE_ENV, "WF_ADV_KILL_AFTER": "1"})
        wait_until(lambda victim=victim: victim.proc.poll() is not None, 60, message="the worker to kill itself")
        assert r.sismember(ENDED, f"{wf.id}:{member}")
        # killed after perform returned, before the step script ran: nothing recorded, no successor pushed
        found = workflow.status(wf.id)
        assert found is not None and (found.step(member).state, found.step(successor).state) == ("enqueued", "waiting")
    # the recoverer, in this process: it must not kill itself (its jobs' middleware is only added under that
    # variable, and every listed step was taken from KILL_AFTER)
    assert "WF_ADV_KILL_AFTER" not in os.environ and r.scard(KILL_AFTER) == 0
    start_worker(*ARGS, "-c", "2", env=RELIABLE_ENV)  # recovers the dead workers' working lists
    wait_until(finished([flow_chain, flow_chord]), 60, interval=0.2, message="both workflows to finish")
    name = step.kiq_name
    assert flow_chain.result() == 1 and flow_chord.result() == [10, 20]
    assert runs_of(r, name, flow_chain, "0") == 2  # ran again after the kill
    assert runs_of(r, name, flow_chain, "1") == runs_of(r, name, flow_chain, "2") == 1  # its successor once
    assert runs_of(r, name, flow_chord, "0.1") == 2
    assert runs_of(r, "WfAdvCollect", flow_chord, "1") == 1 and r.llen(BODIES) == 1  # the body once
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


@pytest.mark.parametrize("member", [Meet, AsyncMeet], ids=["sync", "async"])
def test_members_of_many_small_chords_ending_at_the_same_instant_run_each_body_once(
    config: kiq.Config, start_worker: StartWorker, member: type[kiq.Job]
) -> None:
    r = config.redis
    flows = [chord([member.s(n * 10 + m) for m in range(3)], Collect.s()).perform_async() for n in range(120)]
    for _ in range(2):
        start_worker(*ARGS, "-c", "8", env=RELIABLE_ENV)
    wait_until(finished(flows), 90, interval=0.3, message="every chord to finish")
    bodies = [json.loads(raw) for raw in r.lrange(BODIES, 0, -1)]
    assert sorted(body["wf"] for body in bodies) == sorted(wf.id for wf in flows)  # each body once
    by_id = {body["wf"]: body["results"] for body in bodies}
    assert all(by_id[wf.id] == [n * 10 + m for m in range(3)] for n, wf in enumerate(flows))
    runs = {name: int(count) for name, count in r.hgetall(RUNS).items()}
    assert len(runs) == 120 * 4 and set(runs.values()) == {1}
    # the race happened: in many chords, two or three members ended in the same tick of the clock, on two threads
    met = {key.rsplit(":", 1)[0] for key, count in r.hgetall(TICKS).items() if int(count) >= 2}
    assert len(met) >= 20, f"only {len(met)} of 120 chords had members ending at once"
    print(f"\n{len(met)} of 120 chords had members ending in the same tick")
