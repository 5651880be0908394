"""The Launcher: Sidekiq 7's process registry written by the heartbeat, stats flushing, remote signals,
lifecycle hooks, and leaving the registry on a clean stop."""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import kiq
from kiq.keys import STATS_TTL
from kiq.server.launcher import Launcher
from tests.jobs import wait_for_release
from tests.support import short_block, wait_until


class Hold(kiq.Job):
    """Runs until the test pushes to ``release``."""

    kiq_name = "tests.launcher.Hold"

    def perform(self) -> None:
        redis = kiq.default_config().redis
        redis.rpush("held", self.jid)
        wait_for_release(redis, "release")


class Fail(kiq.Job):
    kiq_name = "tests.launcher.Fail"
    kiq_options = {"retry": False}

    def perform(self) -> None:
        raise ValueError("no")


@pytest.fixture
def launch(config: kiq.Config) -> Iterator[Callable[[], Launcher]]:
    config.heartbeat_interval = 0.1  # the tests wait for heartbeats (remote signals arrive with them)
    config.timeout = 2
    launchers: list[Launcher] = []

    def start() -> Launcher:
        launcher = Launcher(config)
        for manager in launcher.managers:
            short_block(manager.fetcher)  # a stop waits out an idle processor's BRPOP: 0.2 s, not 2 s
        launchers.append(launcher)
        launcher.run()
        return launcher

    yield start
    config.redis.rpush("release", *["go"] * 10)
    for launcher in launchers:
        launcher.stop()


def test_heartbeat_writes_the_process_registry(launch: Callable[[], Launcher], r: redis.Redis) -> None:
    kiq.default_config().add_capsule("serial", ["imports,1"], concurrency=1)
    Hold.perform_async()
    (raw,) = r.lrange("queue:default", 0, -1)
    launcher = launch()
    key = launcher.identity
    assert key.count(":") == 2 and key.split(":")[1] == str(os.getpid()) and len(key.split(":")[2]) == 12
    wait_until(lambda: r.hget(key, "busy") == "1", 20, message="the heartbeat to show the busy job")
    assert r.sismember("processes", key)
    fields = r.hgetall(key)
    assert set(fields) == {"info", "concurrency", "busy", "beat", "quiet", "rss", "rtt_us"}  # as Sidekiq 8.1.2+
    assert fields["concurrency"] == "11"
    assert fields["quiet"] == "false" and int(fields["rss"]) > 0 and int(fields["rtt_us"]) >= 0
    assert abs(float(fields["beat"]) - time.time()) < 10 and 0 < r.ttl(key) <= 60
    info = json.loads(fields["info"])
    assert info["identity"] == key and info["pid"] == os.getpid() and info["concurrency"] == 11
    assert info["queues"] == ["default", "imports"] and info["weights"] == [{"default": 0}, {"imports": 1}]
    assert info["capsules"] == {  # Sidekiq 8.0.9+: launcher.rb to_data, capsule.rb to_h
        "default": {"concurrency": 10, "mode": "strict", "weights": {"default": 0}},
        "serial": {"concurrency": 1, "mode": "random", "weights": {"imports": 1}},
    }
    assert {"hostname", "started_at", "tag", "labels", "version", "embedded"} <= set(info)
    (work,) = r.hgetall(f"{key}:work").values()
    entry = json.loads(work)
    assert entry["queue"] == "default" and entry["payload"] == raw and isinstance(entry["run_at"], int)
    r.rpush("release", "go")
    wait_until(lambda: r.hget(key, "busy") == "0", 20, message="the job to finish")
    assert not r.exists(f"{key}:work")


def test_what_start_up_loaded_is_frozen_out_of_the_cyclic_gc(launch: Callable[[], Launcher]) -> None:
    """A full collection would walk every module and class again: a pause of every thread (docs/performance.md)."""
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        launch()
        assert gc.get_freeze_count() > 1000  # the modules, classes and functions loaded so far
    finally:
        gc.unfreeze()


def test_stats_are_flushed_with_daily_keys(launch: Callable[[], Launcher], r: redis.Redis) -> None:
    Fail.perform_async()
    Hold.perform_async()
    r.rpush("release", "go")
    launch()
    wait_until(lambda: r.get("stat:processed") == "2", 20, message="two processed jobs counted")
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert r.get("stat:failed") == "1"
    assert r.get(f"stat:processed:{day}") == "2" and r.get(f"stat:failed:{day}") == "1"
    assert STATS_TTL - 60 < r.ttl(f"stat:processed:{day}") <= STATS_TTL


def test_remote_tstp_quiets_and_stop_leaves_the_registry(launch: Callable[[], Launcher], r: redis.Redis) -> None:
    launcher = launch()
    key = launcher.identity
    wait_until(lambda: r.sismember("processes", key), 20, message="the first heartbeat")
    r.lpush(f"{key}-signals", "TSTP")
    wait_until(lambda: r.hget(key, "quiet") == "true", 20, message="quiet after a remote TSTP")
    assert launcher.quieted
    processors = [processor.thread for manager in launcher.managers for processor in manager.processors]
    # each stops fetching once the fetch it was in returns (a job it got then goes back to the queue)
    wait_until(lambda: not any(thread.is_alive() for thread in processors), 20, message="the processors to stop")
    Hold.perform_async()
    beat = r.hget(key, "beat")
    wait_until(lambda: r.hget(key, "beat") != beat, 20, message="another heartbeat")
    assert r.llen("queue:default") == 1  # quiet: nothing fetched
    launcher.stop()
    assert not r.sismember("processes", key) and not r.exists(key) and not r.exists(f"{key}:work")


def test_lifecycle_hooks_fire(launch: Callable[[], Launcher], config: kiq.Config) -> None:
    events: list[str] = []

    class Hooks:
        @kiq.hookimpl
        def kiq_startup(self, config: kiq.Config) -> None:
            events.append("startup")

        @kiq.hookimpl
        def kiq_heartbeat(self, config: kiq.Config) -> None:
            events.append("heartbeat")

        @kiq.hookimpl
        def kiq_quiet(self, config: kiq.Config) -> None:
            events.append("quiet")

        @kiq.hookimpl
        def kiq_shutdown(self, config: kiq.Config) -> None:
            events.append("shutdown")

    config.add_plugin(Hooks())
    launcher = launch()
    wait_until(lambda: events.count("heartbeat") >= 2, 20, message="two heartbeats")
    launcher.stop()
    assert events[0] == "startup"
    assert [event for event in events if event != "heartbeat"] == ["startup", "quiet", "shutdown"]


def test_the_heartbeat_and_the_poller_say_when_they_tick_next_and_that_they_ended(
    launch: Callable[[], Launcher], config: kiq.Config
) -> None:
    ticks: list[tuple[str, float | None]] = []

    class Ticks:
        @kiq.hookimpl
        def kiq_loop_tick(self, name: str, due_within: float | None) -> None:
            ticks.append((name, due_within))

    config.poll_interval = 0.1
    config.add_plugin(Ticks())
    launcher = launch()
    wait_until(lambda: ticks.count(("poller", 0.0)) >= 2 and ticks.count(("heartbeat", 0.0)) >= 2, 20)
    launcher.stop()
    beats = [due for name, due in ticks if name == "heartbeat"]
    assert beats[:2] == [0.0, 0.1] and beats[-1] is None  # due now as a beat begins, one interval after it
    polls = [due for name, due in ticks if name == "poller"]
    assert polls[0] == 0.0  # the first pass at once (it learns when the earliest scheduled job is due)
    assert polls[1] is not None and 0 < polls[1] <= 0.15  # then its random wait: 0.5 to 1.5 intervals
    assert polls[2] == 0.0  # the next pass
    assert polls[-1] is None  # ended on purpose (the quiet of the stop): never late


def test_remote_ttin_dumps_threads(
    launch: Callable[[], Launcher], r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    launcher = launch()
    with caplog.at_level("WARNING", logger="kiq"):
        r.lpush(f"{launcher.identity}-signals", "TTIN")
        wait_until(
            lambda: any("thread kiq-default-0" in record.getMessage() for record in caplog.records),
            20,
            message="a thread dump",
        )
