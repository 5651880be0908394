"""Round-robin dispatch: one group's backlog does not delay another group's jobs, nor the queue's ungrouped ones
(a real in-process worker, basic fetch, no group limit)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import kiq
from tests.jobs.groups import STARTS, Sleeps
from tests.support import InProcessWorker, wait_until

StartWorker = Callable[..., InProcessWorker]
WORKER = ("-r", "tests.jobs.groups", "-c", "10")
ENV = {"KIQ_PLUGINS": "groups"}


@pytest.mark.cluster
def test_a_big_groups_backlog_delays_neither_other_groups_nor_ungrouped_jobs(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    e2e_config.add_plugin("groups")
    r = e2e_config.redis
    Sleeps.set(group="big").perform_bulk([[20, "big"]] * 5000)
    worker = start_worker(*WORKER, env=ENV)
    wait_until(lambda: r.llen(STARTS) >= 50, message="the big group to be under way")
    pushed: dict[str, float] = {}
    for round_ in range(30):  # three tenants push 30 jobs each, interleaved, after the big one
        for tenant in ("t1", "t2", "t3"):
            label = f"{tenant}-{round_}"
            pushed[label] = time.time()
            Sleeps.set(group=tenant).perform_async(20, label)
    wait_until(lambda: _started(r, pushed) == len(pushed), 20, message="the three groups' jobs to start")
    ungrouped = {f"u-{n}": time.time() for n in range(10)}
    for label in ungrouped:
        Sleeps.perform_async(20, label)
    wait_until(lambda: _started(r, ungrouped) == len(ungrouped), 20, message="the ungrouped jobs to start")
    waiting = kiq.Queue("default").group("big").size
    worker.stop()
    starts = {label: at for _, label, at in map(json.loads, r.lrange(STARTS, 0, -1))}
    tenant_waits = [starts[label] - at for label, at in pushed.items()]
    ungrouped_waits = [starts[label] - at for label, at in ungrouped.items()]
    print(
        f"\nwaits: tenants max {max(tenant_waits):.3f} s, ungrouped max {max(ungrouped_waits):.3f} s; "
        f"{waiting} of the big group's left"
    )
    assert waiting > 2000  # the big group still had thousands queued
    assert max(tenant_waits) < 1.0
    assert max(ungrouped_waits) < 2.0


def _started(r: object, labels: dict[str, float]) -> int:
    starts = {label for _, label, _ in map(json.loads, r.lrange(STARTS, 0, -1))}  # type: ignore[attr-defined]
    return len(starts & labels.keys())
