"""Helpers for end-to-end tests: start real ``kiq worker`` processes and wait for conditions (never fixed sleeps)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest
import redis

import kiq
from kiq import config as kiq_config
from kiq.tabs import TabRequest, TabView

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_SERVICES = os.environ.get("KIQ_REQUIRE_SERVICES") == "1"
T = TypeVar("T")
F = TypeVar("F")
FAST = {"KIQ_HEARTBEAT_INTERVAL": "0.5"}  # env for worker processes: heartbeats (and remote signals) every 0.5 s
# how long the in-process fetchers of tests wait for work before retrieve_work returns None (production waits
# kiq.fetcher.TIMEOUT, 2 s): a stop or a test that waits for "no job" waits this out, not 2 s
TEST_BLOCK = 0.2


def fresh_config(url: str) -> Iterator[kiq.Config]:
    """A Config on an emptied Redis, the process default until the generator resumes."""
    connection = redis.Redis.from_url(url)
    connection.flushdb()
    connection.close()
    config = kiq.Config(redis_url=url)
    previous = kiq_config._default
    kiq_config.set_default_config(config)
    yield config
    kiq_config._default = previous
    config.redis.close()


def missing_service(reason: str) -> NoReturn:
    """Skip the test for a service this machine lacks; fail it instead under KIQ_REQUIRE_SERVICES=1 (CI)."""
    if REQUIRE_SERVICES:
        pytest.fail(f"KIQ_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a ``kiq`` subprocess: this one's without its ``KIQ_*`` variables (the suite's own
    ``KIQ_TEST_*`` would be warned about as unknown settings, and a ``KIQ_*`` setting would leak into the test)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KIQ_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def short_block(fetcher: F, seconds: float = TEST_BLOCK) -> F:
    """``fetcher`` (a ``kiq.BatchFetch``, e.g. the one a Manager built), set to wait at most ``seconds`` for work."""
    assert isinstance(fetcher, kiq.BatchFetch), fetcher
    fetcher.block_seconds = seconds
    return fetcher


def wait_until(predicate: Callable[[], T], timeout: float = 15.0, interval: float = 0.05, message: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds. The pauses
    between polls start at 5 ms and double up to ``interval``: a condition met at once costs no 50 ms sleep."""
    deadline = time.monotonic() + timeout
    pause = min(0.005, interval)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(pause)
        pause = min(pause * 2, interval)


class WorkerProcess:
    """A ``kiq worker`` subprocess; its combined output goes to a log file the test can read."""

    def __init__(self, args: Sequence[str], redis_url: str, log_path: Path, env: dict[str, str] | None = None):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in wait()/kill()
        full_env = child_env(**(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiq.cli", "worker", "--redis-url", redis_url, *args],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def stop(self, timeout: float = 30.0) -> int:
        """TERM and wait; kill if it does not exit in time (and fail loudly through the return code)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()


def identity_of(r: redis.Redis, worker: WorkerProcess) -> str:
    """The worker's process identity, once its first heartbeat registered it."""

    def find() -> str | None:
        for key in r.smembers("processes"):
            if key.split(":")[1] == str(worker.pid):
                return str(key)
        return None

    return wait_until(find, 30, message=f"worker {worker.pid} in the processes set")


def make_retries_due(r: redis.Redis) -> list[dict[str, Any]]:
    """Move every waiting retry to now (what "retry now" in a UI amounts to, but keeping retry_count, and leaving
    the push to the worker's poller), so the test does not wait out Sidekiq's jitter of up to 9 s; returns the
    entries that were waiting."""
    waiting = r.zrange("retry", 0, -1)
    for member in waiting:
        r.zadd("retry", {member: time.time()}, xx=True)
    return [json.loads(member) for member in waiting]


def raw_redis(config: Any) -> redis.Redis:
    """A client of the config's Redis that returns bytes exactly as stored (kiq's own decodes them)."""
    return redis.Redis.from_url(config.redis_url)


class Unit:
    """A UnitOfWork that records what was done with it (for runners driven by a test, not by a fetcher)."""

    def __init__(self, job: str, queue_name: str = "default") -> None:
        self.job = job
        self.queue_name = queue_name
        self.acked = self.requeued = 0

    def acknowledge(self) -> None:
        self.acked += 1

    def requeue(self) -> None:
        self.requeued += 1


def run_on_event_loop(config: Any, payloads: Sequence[str], concurrency: int = 10) -> list[Unit]:
    """Run async jobs' payloads on a real kiq.server.aio.EventLoop of ``config`` (as a worker's capsule does, but
    handed over here instead of by processor threads); returns their units once every job ended."""
    from kiq.payload import parse_payload
    from kiq.server.aio import EventLoop

    loop = EventLoop(config, "test-loop", concurrency)
    loop.start()
    units = [Unit(payload) for payload in payloads]
    try:
        for unit in units:
            job = parse_payload(unit.job)
            assert loop.hand_off(unit, job, kiq.registry.get(job["class"]), threading.Event())
        wait_until(lambda: not loop.slots, 30, message="the async jobs to end")
    finally:
        loop.close(5)
    return units


def run_async(config: kiq.Config, work: Callable[[], Awaitable[T]]) -> T:
    """``work()`` on a fresh event loop, whose connections are closed after it."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await kiq.AsyncClient(config).close()

    return asyncio.run(main())


def render_tab(config: kiq.Config, name: str, title: str, path: str = "", **query: str) -> TabView:
    """A plugin's dashboard tab rendered as the dashboard renders it: found through the ``kiq_web_tabs`` hook (once,
    by its name, with its title), then ``render`` with the request's path and query."""
    tabs = [tab for found in config.plugins.hook.kiq_web_tabs(config=config) for tab in found]
    (tab,) = [tab for tab in tabs if tab.name == name]
    assert tab.title == title
    return tab.render(TabRequest(path, query, config))
