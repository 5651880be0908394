"""The workflow plugin against bad input, in this process through the real Processor on a real Redis: step results
that are not JSON, workflow fields of the wrong type written by another producer, a workflow expired under a
queued step, a step whose class the worker does not have, and a workflow built at Redis's maxmemory."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins import workflow
from kiq.plugins.workflow import chord
from kiq.plugins.workflow.keys import INDEX, all_keys, workflow_key
from tests.jobs.workflow_adversarial import BODIES, HANDLED, RUNS, Collect, Handler, Returns, Value

from .conftest import drain

NOT_JSON = ["set", "object", "nan", "inf", "bytes", "surrogate", "deep"]


def dead_jobs(r: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(member) for member in r.zrange("dead", 0, -1)]


@pytest.mark.parametrize("kind", NOT_JSON)
def test_a_result_that_is_not_json_fails_the_workflow_naming_the_step_and_the_fix(
    config: kiq.Config, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = config.redis
    wf = chord([Value.s(1), Returns.si(kind)], Collect.s()).on_error(Handler.s()).perform_async()
    drain(config)  # no retries are run: a value that is not JSON would be the same the next time
    with pytest.raises(workflow.WorkflowFailed) as failed:
        wf.result()
    message = str(failed.value)
    assert "workflow step 0.1 (WfAdvReturns)" in message and "not strict JSON" in message, message
    assert "return str, int, float, bool, None, list or dict" in message, message
    assert r.llen(HANDLED) == 1  # on_error once
    assert json.loads(r.lindex(HANDLED, 0))["args"][:2] == [wf.id, failed.value.error["jid"]]
    assert r.llen(BODIES) == 0 and r.zcard("retry") == 0  # the body never runs; nothing waits to run it again
    found = workflow.status(wf.id)
    assert found is not None
    assert (found.step("0.0").state, found.step("0.1").state, found.step("1").state) == ("succeeded", "dead", "skipped")
    assert r.hget(RUNS, f"WfAdvReturns:{wf.id}:0.1") == "1"  # ran once
    assert r.llen("queue:default") == 0
    assert "0.1" in caplog.text  # the worker's log says which step


def test_a_chord_body_over_max_payload_bytes_is_never_pushed_and_fails_the_workflow_saying_why(
    config: kiq.Config,
) -> None:
    # four members of 3,000 bytes each, under a limit of 8,000: each alone fits, the body with all four would not
    # (the same as four 6 MB results under the default 8 MiB, at a test's cost)
    config.max_payload_bytes = 8_000
    r = config.redis
    wf = chord([Value.s("x" * 3_000) for _ in range(4)], Collect.s()).on_error(Handler.s()).perform_async()
    drain(config)
    with pytest.raises(workflow.WorkflowFailed) as failed:
        wf.result()
    message = str(failed.value)
    assert "workflow step 1 (WfAdvCollect)" in message and "more than max_payload_bytes = 8000" in message, message
    assert "Pass large results by reference" in message, message
    assert r.llen(BODIES) == 0 and r.llen("queue:default") == 0 and r.zcard("schedule") == 0  # never pushed
    assert r.llen(HANDLED) == 1  # on_error once, told which step
    handled = json.loads(r.lindex(HANDLED, 0))["args"]
    assert handled[:2] == [wf.id, failed.value.error["jid"]] and "max_payload_bytes" in handled[2]["message"]
    found = workflow.status(wf.id)
    assert found is not None and found.step("1").state == "dead"


def test_a_nul_in_a_result_is_strict_json_and_passes_exactly(config: kiq.Config) -> None:
    wf = (Returns.si("nul") | Value.s()).perform_async()
    drain(config)
    assert wf.result() == "a\x00b"


WRONG_FIELDS = [
    pytest.param({"wf": 12345, "wf_step": "0"}, id="wf-int"),
    pytest.param({"wf": ["x"], "wf_step": "0"}, id="wf-list"),
    pytest.param({"wf_step": 0}, id="step-int"),
    pytest.param({"wf_step": None}, id="step-null"),
    pytest.param({"wf": "no such id!"}, id="wf-not-an-id"),
    pytest.param({"wf_step": "99"}, id="step-not-in-graph"),
]


@pytest.mark.parametrize("fields", WRONG_FIELDS)
def test_workflow_fields_of_the_wrong_type_send_the_job_to_dead_and_the_worker_runs_on(
    config: kiq.Config, fields: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    r = config.redis
    wf = (Value.s(1) | Value.s()).perform_async()
    good = json.loads(r.lindex("queue:default", 0))
    # another producer (a Ruby app, a hand edit) rewrote the step's payload
    bad = {**good, **{key: value for key, value in fields.items() if value is not None}, "jid": kiq.ext.new_jid()}
    bad.update({key: None for key, value in fields.items() if value is None})
    r.rpush("queue:default", json.dumps(bad))  # runs first
    drain(config)
    dead = [job for job in dead_jobs(r) if job["jid"] == bad["jid"]]
    assert len(dead) == 1, dead_jobs(r)
    reason = str(dead[0]["error_message"])
    wrong = next(iter(fields))
    assert wrong in reason and "workflow" in reason, reason
    assert sorted(r.hgetall(RUNS).values()) == ["1", "1"]  # the workflow's two steps, once each; not the bad one
    assert wf.result() == 1  # the real workflow ran on
    assert r.zcard("retry") == 0
    assert not [key for key in r.scan_iter("kiq:wf:*") if r.ttl(key) == -1]  # no key left without its expiry


def test_a_step_whose_outcome_the_step_program_cannot_record_goes_to_dead_at_once_not_into_retries(
    config: kiq.Config,
) -> None:
    """kiq's own code failing on a step's outcome (here the step program, on a successor's graph entry another
    hand overwrote) is not the job's error: the step is not retried 25 times; it goes to the dead set saying why."""
    r = config.redis
    wf = (Value.s(1) | Value.s()).perform_async()
    r.hset(workflow_key(kiq.ext.keyspace(r), wf.id, "steps"), "1", "not json")
    drain(config)
    assert r.zcard("retry") == 0
    (dead,) = [job for job in dead_jobs(r) if job.get("wf_step") == "0"]
    assert "recording its result failed" in str(dead["error_message"]), dead["error_message"]
    assert len(str(dead["error_message"])) < 2_000


def test_a_step_whose_workflow_expired_while_it_was_queued_ends_without_resurrecting_it(config: kiq.Config) -> None:
    r = config.redis
    wf = (Value.s(1) | Value.s() | Value.s()).perform_async()
    r.delete(*all_keys(kiq.ext.keyspace(r), wf.id))  # workflow_retention reached while step 0 waited in its queue
    r.zrem(INDEX, wf.id)
    drain(config)
    assert r.hget(RUNS, f"WfAdvValue:{wf.id}:0") == "1"
    assert not list(r.scan_iter(f"kiq:wf:{wf.id}*"))  # nothing of it written again
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert workflow.status(wf.id) is None
    with pytest.raises(workflow.WorkflowPending, match="expired"):
        wf.result()


@pytest.mark.parametrize("gone", ["steps", "payload", "wait", "state", "result"])
def test_a_step_ending_while_its_workflow_expires_part_by_part_leaves_no_half_workflow(
    config: kiq.Config, gone: str
) -> None:
    """Redis expires a workflow's keys one by one: a step may end between two of them."""
    r = config.redis
    wf = (Value.s(1) | Value.s() | Value.s()).perform_async()
    r.delete(workflow_key(kiq.ext.keyspace(r), wf.id, gone))
    drain(config, retries=True)
    assert r.zcard("retry") == 0
    # whatever is left still expires: nothing of it is kept for ever
    assert {key: r.ttl(key) for key in r.scan_iter(f"kiq:wf:{wf.id}*") if r.ttl(key) < 0} == {}


def test_a_step_class_the_worker_does_not_have_dies_with_a_clear_reason_and_on_error_runs_once(
    config: kiq.Config,
) -> None:
    r = config.redis
    wf = (Value.s(1) | Value.s()).on_error(Handler.s()).perform_async()
    payload = json.loads(r.rpop("queue:default"))
    r.lpush("queue:default", json.dumps({**payload, "class": "NoSuchStepClass", "retry": 1}))
    drain(config, retries=True)
    dead = [job for job in dead_jobs(r) if job.get("wf") == wf.id]
    assert len(dead) == 1 and "NoSuchStepClass" in str(dead[0]["error_message"]), dead
    with pytest.raises(workflow.WorkflowFailed, match="NoSuchStepClass"):
        wf.result()
    assert r.llen(HANDLED) == 1
    found = workflow.status(wf.id)
    assert found is not None and found.step("0").state == "dead" and found.step("1").state == "skipped"


@pytest.mark.own_redis
@pytest.mark.parametrize("start", ["sync", "asyncio"])
def test_a_workflow_built_at_maxmemory_raises_a_clear_error_and_leaves_nothing_half_pushed(
    config: kiq.Config, start: str
) -> None:
    r = config.redis
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 200_000)
    ballast = 0
    try:  # fill Redis to its limit
        while True:
            r.set(f"ballast:{ballast}", "x" * 10_000)
            ballast += 1
    except redis.exceptions.OutOfMemoryError:
        r.delete(f"ballast:{ballast - 1}")  # just below the limit: the first write of the start goes through
    canvas = chord([Value.s(n) for n in range(3000)], Collect.s())
    with pytest.raises(workflow.WorkflowError, match=r"maxmemory|out of memory|OOM") as refused:
        if start == "sync":
            canvas.perform_async()
        else:
            asyncio.run(canvas.aio.perform_async())
    assert "nothing of it was left in Redis" in str(refused.value), str(refused.value)
    assert "start it again once Redis takes writes" in str(refused.value)
    r.config_set("maxmemory", 0)
    assert r.llen("queue:default") == 0
    assert not list(r.scan_iter("kiq:wf:*")) and r.zcard(INDEX) == 0  # no half-written workflow left
    wf = canvas.perform_async()  # memory back: the same canvas starts
    drain(config)
    assert wf.result(wait=5) == list(range(3000))


@pytest.mark.own_redis
def test_a_step_outcome_refused_at_maxmemory_is_an_out_of_memory_refusal_on_every_redis_version(
    config: kiq.Config,
) -> None:
    """Redis 6 reports a script's write refused at maxmemory as a script error; the worker holds an outcome only
    when it is told Redis is out of memory (the embedded server is 6.2, the system's 7)."""
    r = config.redis
    wf = (Value.s(1) | Value.s()).perform_async()
    r.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            workflow.WorkflowPlugin().steps(config).run("succeeded", wf.id, "0", "1")
    finally:
        r.config_set("maxmemory", 0)
    assert workflow.status(wf.id).step("1").state == "waiting"  # type: ignore[union-attr]


def test_many_odd_results_in_one_group_fail_the_workflow_once(config: kiq.Config) -> None:
    r = config.redis
    wf = chord([Returns.si(kind) for kind in NOT_JSON], Collect.s()).on_error(Handler.s()).perform_async()
    drain(config)
    with pytest.raises(workflow.WorkflowFailed):
        wf.result()
    assert r.llen(HANDLED) == 1 and r.llen(BODIES) == 0
