"""Each successor and chord body is pushed once, in this process on a real Redis: a step delivered twice (as
reliable fetch redelivers a job whose worker died after the step's outcome was recorded), the last two members of
chords finishing at the same instant on two connections, a member that fails then succeeds on retry, and a
10,000-member chord started in one round trip per 1,000 steps."""

from __future__ import annotations

import json
import threading

import pytest

import kiq
import kiq.ext
from kiq.plugins import workflow
from kiq.plugins.workflow import chord, group
from kiq.plugins.workflow.keys import workflow_key
from kiq.plugins.workflow.scripts import Steps
from tests.jobs.workflow import FAIL, RUNS, Add, Collect, Const, Flaky, Mul, Total

from .conftest import drain


def test_a_step_delivered_again_after_its_outcome_is_not_run_and_pushes_nothing_more(config: kiq.Config) -> None:
    r = config.redis
    wf = (Add.s(1, 2) | Mul.s(10)).perform_async()
    first = r.lindex("queue:default", 0)
    assert kiq.ext.loads(first)["wf_step"] == "0"
    assert drain(config) == 2
    assert wf.result() == 30
    r.lpush("queue:default", first)  # step 0 again: its worker was killed before the acknowledgement
    assert drain(config) == 1
    assert r.llen("queue:default") == 0  # step 1 not pushed again
    assert r.hget(RUNS, f"WfAdd:{wf.id}:0") == "1" and r.hget(RUNS, f"WfMul:{wf.id}:1") == "1"


def test_the_last_two_members_finishing_at_the_same_instant_push_the_body_once(config: kiq.Config) -> None:
    r = config.redis
    assert config.redis_url is not None
    racers = [Steps(kiq.Config(redis_url=config.redis_url, plugins=["workflow"])) for _ in range(2)]
    flows = [chord([Const.s(0), Const.s(1)], Total.s()).perform_async() for _ in range(100)]
    r.delete("queue:default")  # the members are finished by hand below, at once
    for wf in flows:
        barrier = threading.Barrier(2)

        def finish(steps: Steps, member: str, wf: workflow.Workflow = wf, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            steps.run("succeeded", wf.id, member, member[-1])

        threads = [threading.Thread(target=finish, args=(racers[i], f"0.{i}")) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    bodies = [kiq.ext.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert sorted(body["wf"] for body in bodies) == sorted(wf.id for wf in flows)  # one body each
    assert all(body["args"] == [[0, 1]] for body in bodies)
    for steps in racers:
        steps.config.redis.close()


def test_a_member_that_fails_then_succeeds_on_retry_lets_the_body_run_once(config: kiq.Config) -> None:
    r = config.redis
    r.set(FAIL, 1)
    wf = chord([Flaky.s("a"), Const.s("b")], Collect.s()).perform_async()
    drain(config)
    found = workflow.status(wf.id)
    assert found is not None and found.step("0.0").state == "failed" and "failing" in str(found.step("0.0").error)
    assert found.step("1").state == "waiting" and found.step("1").jid is None
    r.delete(FAIL)
    drain(config, retries=True)
    assert wf.result() == ["a", "b"]
    assert r.hget(RUNS, f"WfCollect:{wf.id}:1") == "1"


def test_allow_failures_gives_none_for_a_dead_member_and_its_error_in_the_status(config: kiq.Config) -> None:
    from tests.jobs.workflow import Boom

    wf = chord([Const.s(1), Boom.s(), Const.s(3)], Collect.s(), allow_failures=True).perform_async()
    drain(config)
    assert wf.result() == [1, None, 3]
    member = workflow.status(wf.id).step("0.1")  # type: ignore[union-attr]
    assert member.state == "dead" and member.error == "ValueError: boom" and member.result is None


def test_a_10000_member_chord_starts_in_a_round_trip_per_1000_steps_and_its_body_runs_once(
    e2e_config: kiq.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on one Redis (8 s of CPU a run): the round trips counted are the client's, the same on each server
    config = e2e_config
    r = config.redis
    round_trips = []
    real = kiq.ext.run_pipeline
    monkeypatch.setattr(kiq.ext, "run_pipeline", lambda *args, **kw: round_trips.append(1) or real(*args, **kw))
    wf = (group(Const.s(n) for n in range(10_000)) | Total.s()).perform_async()
    monkeypatch.undo()
    assert len(round_trips) == 11 + 10  # the graph (10,001 steps), then the 10,000 first steps
    assert r.llen("queue:default") == 10_000
    assert r.hlen(workflow_key(kiq.ext.keyspace(r), wf.id, "payload")) == 1  # the body's pieces only
    drain(config)
    assert wf.result() == sum(range(10_000))
    assert r.hget(RUNS, f"WfTotal:{wf.id}:1") == "1"
    assert json.loads(r.hget(workflow_key(kiq.ext.keyspace(r), wf.id, "result"), "1")) == sum(range(10_000))
