"""A real Redis Cluster for the batch and workflow plugins' cluster tests, until tests/cluster_support.py's fixtures
land: ``KIQ_TEST_CLUSTER_URL`` (``redis+cluster://host:port``; the tests skip without it) and the key layout
``KIQ_TEST_CLUSTER_SLOTS`` (``one``, the default, or ``queue``). Start one with ``bash cluster.sh start PORT``.

The cluster is emptied before each test (every primary), and its config is the process default meanwhile; its
workers are real ``kiq worker`` processes on the same cluster and layout, polling the schedule every 0.1 s (in the
``queue`` layout a callback or a next step goes through it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kiq
from kiq import config as kiq_config
from tests.support import FAST, ROOT, WorkerProcess, child_env

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def cluster_config() -> Iterator[kiq.Config]:
    url = os.environ.get("KIQ_TEST_CLUSTER_URL")
    if not url:
        pytest.skip("no Redis Cluster: set KIQ_TEST_CLUSTER_URL=redis+cluster://host:port (and KIQ_TEST_CLUSTER_SLOTS)")
    config = kiq.Config(redis_url=url, slots=os.environ.get("KIQ_TEST_CLUSTER_SLOTS", "one"), poll_interval=0.1)
    config.redis.flushall()  # a cluster client sends it to every primary
    previous = kiq_config._default
    kiq_config.set_default_config(config)
    yield config
    kiq_config._default = previous
    config.redis.close()


@pytest.fixture
def cluster_worker(cluster_config: kiq.Config, tmp_path: Path) -> Iterator[StartWorker]:
    """``cluster_worker("-r", "tests.jobs.x", env={...})``: a ``kiq worker`` on the cluster, killed at teardown."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        assert cluster_config.redis_url is not None
        layout = {"KIQ_SLOTS": str(cluster_config.slots), "KIQ_POLL_INTERVAL": "0.1"}
        worker = WorkerProcess(args, cluster_config.redis_url, tmp_path / f"worker-{len(started)}.log",
                               {**FAST, **layout, **(env or {})})  # fmt: skip
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def pushed_by_script(r: Any, queue: str) -> dict[str, Any]:
    """The one job a plugin's script pushed to ``queue`` (``kiq.ENQUEUE_LUA``): in its list, stamped
    ``enqueued_at``, the queue listed in ``queues``; or in the ``queue`` layout, where the list is in another slot,
    in the ``schedule`` set due now, unstamped (the poller's push stamps it)."""
    keys = kiq.keyspace(r)
    if keys.slots == "queue":
        ((payload, score),) = r.zrange(keys.key("schedule"), 0, -1, withscores=True)
        assert r.llen(keys.queue(queue)) == 0 and abs(score - time.time()) < 30
        job: dict[str, Any] = kiq.loads(payload)
        assert "enqueued_at" not in job
        return job
    (payload,) = r.lrange(keys.queue(queue), 0, -1)
    assert queue in r.smembers(keys.key("queues")) and r.zcard(keys.key("schedule")) == 0
    job = kiq.loads(payload)
    assert isinstance(job["enqueued_at"], float)
    return job


def cli(config: kiq.Config, *args: str) -> Any:
    """The JSON that ``kiq <args> --json`` prints, run on the cluster of ``config`` (its layout and plugins)."""
    assert config.redis_url is not None
    env = child_env(KIQ_SLOTS=str(config.slots), KIQ_PLUGINS="batch workflow")
    done = subprocess.run(
        [sys.executable, "-m", "kiq", *args, "--json", "--redis-url", config.redis_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return kiq.loads(done.stdout)
