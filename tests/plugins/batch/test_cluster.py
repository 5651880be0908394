"""Batches on the real clusters (the ``cluster`` mark's 4 targets: Redis 7 and Valkey 9, both layouts), run by a
real ``kiq worker``: a parent batch with a nested child fires each one's complete and success callbacks once; a
batch whose job dies fires death and complete, not success; the keys are all in kiq's shared slot, nothing is left
in the schedule (the ``queue`` layout's route for callbacks), and the reads (status, aio, the list, the dashboard
tab, the fleet metrics) find them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import kiq
import kiq.ext
from kiq.plugins.batch import Batch, aio, batches, status
from kiq.plugins.batch.metrics import fleet_readings
from kiq.tabs import Table
from tests.cluster_support import CLUSTER_WORKER_ENV, cli, pushed_by_script
from tests.jobs.batch import FAIL
from tests.jobs.batch_cluster import Dies, Noop, Recorded
from tests.support import WorkerProcess, render_tab, wait_until

from .conftest import events

pytestmark = pytest.mark.cluster(only=True)

ARGS = ("-r", "tests.jobs.batch_cluster", "-q", "default", "-c", "4")
ENV = {**CLUSTER_WORKER_ENV, "KIQ_PLUGINS": "batch"}
CALLBACKS = {"on_complete": Recorded, "on_success": Recorded, "on_death": Recorded}


def test_a_batch_with_a_child_and_a_batch_with_a_death_fire_each_callback_once(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    config = e2e_config
    r = config.redis
    keys = kiq.ext.keyspace(r)
    parent = Batch("parent", config=config, **CALLBACKS)
    with parent:
        Noop.perform_async()
        Noop.perform_async()
        with Batch("child", config=config, **CALLBACKS) as child:
            Noop.perform_async()
    r.set(FAIL, "1")
    dying = Batch("dying", config=config, **CALLBACKS)

    async def open_async() -> None:  # the asyncio client's route to the batch program
        async with dying:
            Dies.perform_async()
            Noop.perform_async()

    asyncio.run(open_async())
    start_worker(*ARGS, env=ENV)

    def settled() -> bool:
        return all(events(r, bid).get("complete") for bid in (parent.bid, child.bid, dying.bid))

    wait_until(settled, 60, interval=0.1, message="every batch's complete callback")
    wait_until(lambda: events(r, parent.bid).get("success"), 30, message="the parent's success callback")
    assert events(r, child.bid) == {"complete": 1, "success": 1}
    assert events(r, parent.bid) == {"complete": 1, "success": 1}
    wait_until(lambda: events(r, dying.bid).get("death"), 30, message="the death callback")
    assert events(r, dying.bid) == {"death": 1, "complete": 1}

    found = status(parent.bid, config)
    assert found is not None and found.success and found.children == {child.bid: "success"}
    assert found.total == 4  # its two jobs, and the child's two callbacks (a child's callbacks join its parent)
    dead = asyncio.run(aio.status(dying.bid, config))
    assert dead is not None and dead.complete and not dead.success and dead.dead == 1
    assert {b.bid for b in batches(config)} == {parent.bid, child.bid, dying.bid}
    assert {b.bid for b in asyncio.run(aio.batches(config))} == {parent.bid, child.bid, dying.bid}
    assert {b["bid"] for b in cli(config, "batches", plugins="batch")} == {parent.bid, child.bid, dying.bid}
    assert cli(config, "batches", dying.bid, plugins="batch")["dead"] == 1
    (listed,) = [block for block in render_tab(config, "batches", "Batches").blocks if isinstance(block, Table)]
    assert len(listed.rows) == 3
    assert {reading.name: reading.value for reading in fleet_readings(config)} == {
        "kiq_batches": 3,
        "kiq_batches_open": 0,
    }
    assert r.exists(keys.key(f"kiq:batch:{parent.bid}:kids")) == 1
    assert list(r.scan_iter(match="kiq:*")) == []  # no key outside the shared slot's tag
    assert r.zcard(keys.key("schedule")) == 0  # the callbacks that went through it were pushed


def test_a_callback_goes_to_its_queue_or_in_the_queue_layout_through_the_schedule(config: kiq.Config) -> None:
    r = config.redis
    batch = Batch("empty", on_complete=Recorded.set(queue="callbacks"), config=config)
    with batch:  # no jobs: complete (and success) when the block closes, with no worker
        pass
    job = pushed_by_script(r, "callbacks")
    assert job["batch_callback"] == {"bid": batch.bid, "event": "complete"}
