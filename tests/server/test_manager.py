"""Capsules and the Manager: queue modes, extra capsules, a graceful stop, and a hard shutdown that requeues."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import kiq
from kiq.errors import ConfigError
from kiq.fetcher import Capsule
from kiq.server.manager import Manager, capsules_for
from tests.support import short_block, wait_until


class Count(kiq.Job):
    kiq_name = "tests.manager.Count"

    def perform(self, key: str) -> None:
        kiq.default_config().redis.hincrby("performed", key, 1)


class Linger(kiq.Job):
    kiq_name = "tests.manager.Linger"

    def perform(self, seconds: float) -> None:
        redis = kiq.default_config().redis
        redis.rpush("started", self.jid)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                time.sleep(0.02)
        except BaseException as exc:
            redis.rpush("interrupted", type(exc).__name__)
            raise
        redis.rpush("finished", self.jid)


@pytest.fixture
def start_manager(config: kiq.Config) -> Iterator[Callable[[int], Manager]]:
    """Managers on the default queue; any still running at the end of a test are stopped. Their idle processors
    wait for work 0.2 s at a time (not 2 s), so a stop does not wait out a long BRPOP."""
    managers: list[Manager] = []

    def start(concurrency: int) -> Manager:
        manager = Manager(Capsule("default", [("default", 0)], concurrency, config))
        short_block(manager.fetcher)
        managers.append(manager)
        manager.start()
        return manager

    yield start
    for manager in managers:
        manager.stop(time.monotonic() + 1)


@pytest.mark.parametrize(
    ("weights", "mode"),
    [((0, 0), "strict"), ((1, 1), "random"), ((3, 1), "weighted"), ((2, 0), "weighted"), ((1, 2), "weighted")],
)
def test_capsule_mode(weights: tuple[int, int], mode: str) -> None:
    capsule = Capsule("default", [("a", weights[0]), ("b", weights[1])], 1, kiq.Config())
    assert capsule.mode == mode
    assert capsule.weights == {"a": weights[0], "b": weights[1]}


def test_capsules_for_the_config_and_added_capsules() -> None:
    config = kiq.Config(queues=["critical,2", "default"], concurrency=4)
    config.add_capsule("serial", ["imports"], concurrency=1)
    default, serial = capsules_for(config, "host:1:abc")
    assert (default.name, default.queues, default.concurrency) == ("default", [("critical", 2), ("default", 0)], 4)
    assert (serial.name, serial.queues, serial.concurrency, serial.identity) == (
        "serial",
        [("imports", 0)],
        1,
        "host:1:abc",
    )
    with pytest.raises(ConfigError, match="default capsule"):
        config.add_capsule("default", ["x"])
    with pytest.raises(ConfigError, match="capsule 'bad'"):
        config.add_capsule("bad", ["x"], concurrency=0)


def test_manager_runs_jobs_and_stops_gracefully(start_manager: Callable[[int], Manager], r: redis.Redis) -> None:
    Count.perform_bulk([[f"k{i}"] for i in range(50)])
    Linger.perform_async(0.3)
    manager = start_manager(3)
    wait_until(lambda: r.llen("started") == 1 and r.hlen("performed") == 50, 20, message="the jobs to run")
    manager.stop(time.monotonic() + 10)
    assert r.llen("finished") == 1 and r.llen("queue:default") == 0
    assert set(r.hvals("performed")) == {"1"}
    assert not any(processor.thread.is_alive() for processor in manager.processors)
    assert sum(processor.processed for processor in manager.processors) == 51


def test_hard_shutdown_requeues_the_running_job_and_interrupts_it(
    start_manager: Callable[[int], Manager], r: redis.Redis
) -> None:
    jid = Linger.perform_async(30)
    manager = start_manager(2)
    wait_until(lambda: r.llen("started") == 1, 20, message="the job to start")
    started = time.monotonic()
    manager.stop(time.monotonic() + 0.5)
    assert time.monotonic() - started < 5
    (requeued,) = r.lrange("queue:default", 0, -1)
    job: dict[str, Any] = kiq.payload.loads(requeued)
    assert job["jid"] == jid
    assert r.lrange("interrupted", 0, -1) == ["Shutdown"] and r.llen("finished") == 0
    assert r.zcard("retry") == 0  # an interrupted job is not a failure
    assert not any(processor.thread.is_alive() for processor in manager.processors)
