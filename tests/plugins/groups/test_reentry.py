"""A grouped job found in the queue's own list (a stop requeued it, reliable fetch recovered it, a process without
the plugin pushed it) goes back into its group, under its limit; a payload that only looks grouped runs as it is."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import kiq
from tests.jobs.groups import SPANS
from tests.support import InProcessWorker, wait_until


def test_jobs_back_in_the_queues_list_return_to_their_groups(
    e2e_config: kiq.Config, start_worker: Callable[..., InProcessWorker]
) -> None:
    r = e2e_config.redis
    plain = kiq.Config(redis_url=e2e_config.redis_url)  # a pusher without the plugin: the queue's own list
    try:
        for n in range(6):
            kiq.Client(plain).push({"class": "GroupsSleeps", "group": "solo", "args": [100, f"solo-{n}"]})
        kiq.Client(plain).push({"class": "GroupsSleeps", "group": 5, "args": [1, "group-5"]})  # not a group id
        kiq.Client(plain).push({"class": "GroupsSleeps", "args": [1, 'text "group": "x"']})  # only in an argument
    finally:
        plain.redis.close()
    r.lpush(kiq.ext.keyspace(r).queue("default"), '{"class": "GroupsSleeps", "group": "x", "args": [')  # broken
    assert kiq.Queue("default").size == 9
    e2e_config.add_plugin("groups")
    kiq.Queue("default").group("solo").concurrency = 1
    worker = start_worker("-r", "tests.jobs.groups", "-c", "5", env={"KIQ_PLUGINS": "groups"})
    wait_until(lambda: r.llen(SPANS) == 8, 20, message="the 8 jobs that can run")
    wait_until(lambda: r.zcard("dead") == 1, 10, message="the broken payload in dead")
    worker.stop()
    spans = [json.loads(raw) for raw in r.lrange(SPANS, 0, -1)]
    solo = sorted((start, end) for group, start, end, _ in spans if group == "solo")
    assert len(solo) == 6
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(solo))  # one at a time
    assert {label for *_, label in spans} >= {"group-5", 'text "group": "x"'}
    assert kiq.Queue("default").group("solo").running == 0
