"""Batches run here by the real Processor on a real Redis: jobs pushed in a block join the batch, its callbacks are
pushed once per event with their arguments, a failure completes it without success until the job succeeds, a death
fires ``death`` once, a running job adds jobs to its own batch, children complete before their parent, and a
batch's state expires."""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest
import redis

import kiq
import kiq.ext
from kiq.api import DeadSet
from kiq.plugins.batch import Batch, BatchError, aio, status
from tests.jobs.batch import (
    ARGS,
    FAIL,
    ORDER,
    AddsJobs,
    Callback,
    Dies,
    Flaky,
    MakesChild,
    Marked,
    Noop,
)
from tests.tracking_support import retry_now, work_off

from .conftest import drain, events

EVERY = {"on_complete": Callback, "on_success": Callback, "on_death": Callback}


def test_jobs_pushed_in_the_block_join_the_batch_and_each_callback_runs_once(
    config: kiq.Config, r: redis.Redis
) -> None:
    batch = Batch("import", on_complete=(Callback, [1, "complete"]), on_success=Callback.set(queue="low"))
    with batch:
        jids = [Noop.perform_async(index) for index in range(5)]
        jids += Noop.perform_bulk([[index] for index in range(15)])
    queued = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert {job["bid"] for job in queued} == {batch.bid} and {job["jid"] for job in queued} == set(jids)
    before = status(batch.bid)
    assert before is not None and (before.total, before.pending, before.failures, before.open_blocks) == (20, 20, 0, 0)
    assert not before.complete and before.description == "import"
    assert before.callbacks == {"complete": "BatchCallback", "success": "BatchCallback"}

    drain(config)
    drain(config, "low")
    assert events(r, batch.bid) == {"complete": 1, "success": 1}
    assert json.loads(r.lindex(ARGS, 0)) == {"args": [1, "complete"]}  # complete fires before success
    after = status(batch.bid)
    assert after is not None and (after.pending, after.failures, after.complete, after.success) == (0, 0, True, True)
    assert after.complete_at is not None and after.success_at is not None and after.created_at <= after.complete_at
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}  # nothing fires again


def test_the_block_keeps_the_batch_open_even_when_its_jobs_finish_first(config: kiq.Config, r: redis.Redis) -> None:
    batch = Batch(**EVERY)
    with batch:
        Noop.perform_async(1)
        assert work_off(config) == 1  # runs, and is counted, before its block registered it
        drain(config)
        assert events(r, batch.bid) == {}
        running = status(batch.bid)
        assert running is not None and running.open_blocks == 1 and running.total == 1
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}
    done = status(batch.bid)
    assert done is not None and (done.total, done.pending, done.open_blocks) == (1, 0, 0)


def test_an_empty_batch_completes_and_succeeds_when_its_block_closes(config: kiq.Config, r: redis.Redis) -> None:
    with Batch(**EVERY) as batch:
        pass
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}


def test_jobs_pushed_from_asyncio_code_join_the_batch(config: kiq.Config, r: redis.Redis) -> None:
    batch = Batch("async", **EVERY)

    async def push() -> None:
        async with batch:
            await Noop.aio.perform_async(1)
            await Noop.set(queue="default").aio.perform_bulk([[2], [3]])
            await asyncio.gather(*(Noop.aio.perform_async(n) for n in range(4, 7)))  # tasks inherit the block
        found = await aio.status(batch.bid)
        assert found is not None and found.total == 6
        assert [b.bid for b in await aio.batches()] == [batch.bid]
        await kiq.AsyncClient(config).close()

    asyncio.run(push())
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}


def test_a_failed_job_completes_the_batch_and_success_waits_for_its_retry(config: kiq.Config, r: redis.Redis) -> None:
    r.set(FAIL, 1)
    with Batch(**EVERY) as batch:
        Flaky.perform_async()
        Noop.perform_async()
    drain(config)
    assert events(r, batch.bid) == {"complete": 1}
    failing = status(batch.bid)
    assert failing is not None and (failing.pending, failing.failures, failing.dead) == (1, 1, 0)
    assert r.zcard("retry") == 1
    retry_now(config)
    drain(config)  # fails again: still complete once, no success
    assert events(r, batch.bid) == {"complete": 1}
    r.delete(FAIL)
    retry_now(config)
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}
    done = status(batch.bid)
    assert done is not None and (done.pending, done.failures) == (0, 0)


def test_a_job_that_dies_fires_death_once_and_no_success_until_it_succeeds(config: kiq.Config, r: redis.Redis) -> None:
    r.set(FAIL, 1)
    with Batch(**EVERY) as batch:
        jids = [Dies.perform_async(), Dies.perform_async(), Noop.perform_async()]
    drain(config)
    assert events(r, batch.bid) == {"death": 1, "complete": 1}
    found = status(batch.bid)
    assert found is not None and (found.total, found.pending, found.failures, found.dead) == (3, 2, 2, 2)
    assert found.death_at is not None and not found.success
    # dead jobs retried by hand that succeed count as successes after all
    r.delete(FAIL)
    for jid in jids[:2]:
        assert DeadSet(config).retry_by_jid(str(jid))
    drain(config)
    assert events(r, batch.bid) == {"death": 1, "complete": 1, "success": 1}
    done = status(batch.bid)
    assert done is not None and (done.pending, done.failures, done.dead) == (0, 0, 0)


def test_a_running_job_adds_jobs_to_its_own_batch_which_waits_for_them(config: kiq.Config, r: redis.Redis) -> None:
    with Batch(**EVERY) as batch:
        AddsJobs.perform_async(3)
    # AddsJobs, the 3 jobs it added, then the callbacks (pushed by the outcome writer's thread: a work_off alone
    # may or may not find them)
    assert drain(config) == 6
    assert events(r, batch.bid) == {"complete": 1, "success": 1}
    found = status(batch.bid)
    assert found is not None and (found.total, found.pending) == (4, 0)
    assert r.lrange(ORDER, 0, 3) == ["job:added-0", "job:added-1", "job:added-2", f"{batch.bid}:complete"]


def test_a_child_batch_and_its_callbacks_come_before_its_parent(config: kiq.Config, r: redis.Redis) -> None:
    with Batch("parent", **EVERY) as parent:
        MakesChild.perform_async(2, 0)
    drain(config)
    child = r.lindex(ORDER, 0).removeprefix("child:")
    assert r.lrange(ORDER, 1, -1) == [
        "job:child-0",
        "job:child-1",
        f"{child}:complete",
        f"{child}:success",
        f"{parent.bid}:complete",
        f"{parent.bid}:success",
    ]
    parent_status, child_status = status(parent.bid), status(child)
    assert parent_status is not None and child_status is not None
    assert parent_status.children == {child: "success"} and child_status.parent_bid == parent.bid
    assert parent_status.total == 3  # MakesChild and the child's two callbacks, which are jobs of the parent


def test_a_death_in_a_child_fires_death_in_the_child_and_each_ancestor_once(config: kiq.Config, r: redis.Redis) -> None:
    r.set(FAIL, 1)
    with Batch("grandparent", **EVERY) as top, Batch("parent", **EVERY) as middle, Batch("child", **EVERY) as child:
        Dies.perform_async()
        Dies.perform_async()
    drain(config)
    for bid in (top.bid, middle.bid, child.bid):
        assert events(r, bid) == {"death": 1, "complete": 1}, bid
    top_status = status(top.bid)
    assert top_status is not None and top_status.children == {middle.bid: "complete"} and not top_status.success


def test_no_jobs_can_join_a_batch_that_succeeded_or_is_gone(config: kiq.Config) -> None:
    with Batch() as batch:
        Noop.perform_async()
    drain(config)
    with pytest.raises(BatchError, match="succeeded"), Batch.open(batch.bid):
        pass
    with pytest.raises(BatchError, match="is gone"), Batch.open("no-such-batch"):
        pass
    with pytest.raises(ValueError, match="not a batch id"):
        Batch.open("two words")
    with pytest.raises(BatchError, match="open in this block already"), Batch() as fresh, fresh:
        pass


def test_a_block_that_raises_still_registers_the_jobs_it_pushed(config: kiq.Config, r: redis.Redis) -> None:
    batch = Batch(**EVERY)
    with pytest.raises(kiq.JobArgumentError, match="not UTF-8"), batch:
        Noop.perform_async(1)
        Noop.perform_async("caf\udce9")  # refused at the push, as outside a batch: nothing written
    found = status(batch.bid)
    assert found is not None and (found.total, found.open_blocks) == (1, 0)
    drain(config)
    assert events(r, batch.bid) == {"complete": 1, "success": 1}


@pytest.mark.parametrize(
    ("callback", "error"),
    [
        ((Callback, ["caf\udce9"]), "not UTF-8"),
        ((Callback, [math.nan]), "NaN"),
        ((Marked, []), "takes 1 or 2 arguments, got 0"),
        ((Callback, (1, 2)), "must be a list"),
        (print, "a job class"),
    ],
)
def test_a_callback_that_cannot_be_pushed_is_refused_and_nothing_is_written(
    config: kiq.Config, r: redis.Redis, callback: object, error: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=error), Batch(on_success=callback):  # type: ignore[arg-type]
        Noop.perform_async()
    assert r.keys("kiq:batch*") == [] and r.llen("queue:default") == 0


def test_descriptions_and_arguments_that_are_not_utf8_or_huge_come_back_unchanged(
    config: kiq.Config, r: redis.Redis
) -> None:
    description = "caf\udce9 \ud800 " + "x" * 1_000_000
    huge = "y" * 1_000_000
    with Batch(description, on_success=(Callback, [huge, {"k": [1.5, None]}])) as batch:
        Noop.perform_async(huge)
    drain(config)
    found = status(batch.bid)
    assert found is not None and found.description == description and found.success
    assert json.loads(r.lindex(ARGS, 0)) == {"args": [huge, {"k": [1.5, None]}]}


def test_the_state_expires_after_success_and_while_it_waits(config: kiq.Config, r: redis.Redis) -> None:
    config.batch_expiry, config.batch_retention = 3600, 60
    with Batch(**EVERY) as waiting:
        Flaky.set(queue="elsewhere").perform_async()
    with Batch(**EVERY) as done:
        Noop.perform_async()
    drain(config)
    assert 3500 < r.ttl(f"kiq:batch:{waiting.bid}") <= 3600
    assert 3500 < r.ttl(f"kiq:batch:{waiting.bid}:pending") <= 3600
    assert 0 < r.ttl(f"kiq:batch:{done.bid}") <= 60 and 0 < r.ttl(f"kiq:batch:{done.bid}:jids") <= 60
    untimed = [key for key in r.scan_iter("kiq:batch:*") if r.ttl(key) < 0]
    assert untimed == []
    r.delete(f"kiq:batch:{done.bid}")  # as if it expired: the listing forgets it
    assert [b.bid for b in kiq.plugins.batch.batches(config)] == [waiting.bid]
    assert r.zrange("kiq:batches", 0, -1) == [waiting.bid]


def test_a_callback_takes_keyword_arguments_as_a_call(config: kiq.Config, r: redis.Redis) -> None:
    with (
        pytest.raises(kiq.InvalidJobError, match="unexpected keyword argument 'nope'"),
        Batch(on_success=(Marked, kiq.Call("x", nope=1))),
    ):
        Noop.perform_async(1)  # refused where the batch is made, as a push would be
    with Batch(on_success=(Marked, kiq.Call(name="called", ms=1))):  # all by keyword: none can be lost
        Noop.perform_async(1)
    drain(config)
    assert r.lrange(ORDER, 0, -1) == ["job:called"]


@pytest.mark.parametrize(("wire", "form"), [(7, float), (8, int)])
def test_a_callback_pushed_by_the_program_has_enqueued_at_in_the_sidekiq_wire_form(
    config: kiq.Config, r: redis.Redis, wire: int, form: type
) -> None:
    """The Lua program stamps ``enqueued_at`` as the push path does: float seconds, or Sidekiq 8's integer ms."""
    config.sidekiq_wire = wire
    before = time.time()
    with Batch(on_complete=Callback.set(queue="callbacks")):
        Noop.perform_async()
    drain(config)
    [callback] = [json.loads(raw) for raw in r.lrange("queue:callbacks", 0, -1)]
    stamp = callback["enqueued_at"]
    assert type(stamp) is form and before <= kiq.ext.epoch_seconds(stamp) <= time.time()  # type: ignore[operator]
