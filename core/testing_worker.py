"""A real worker in the test's own process (Dramatiq's ``worker.join()``): ``kiq.testing.Worker``.

It runs what ``kiq worker`` runs, a ``kiq.server.launcher.Launcher`` with its fetchers, processors, poller and
heartbeat, on real Redis, in threads of this process instead of a process of its own: a test pushes jobs, calls
``join()`` and reads what the jobs did, with no process to start (a worker process costs ~1 s to import kiq and
the app). What it does not have is the process: OS signals, exit codes, ``kill -9``, forks (``-p``); a test of
those starts ``kiq worker``.

    with kiq.testing.Worker(config, queues=["default"], concurrency=2) as worker:
        MyJob.perform_async(1)
        worker.join(timeout=10)

The worker runs on a Config of its own: ``config``'s settings with the given overrides, as a worker process would
load them, marked a worker's; the ``configure_server`` callbacks run on it (as in a worker process), so server
middleware added there applies. The jobs must be registered in this process (imported, or ``require``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

from . import config as config_module
from .config import Config
from .keys import RETRY, SCHEDULE, keyspace
from .logging import ContextFilter, JsonFormatter, PlainFormatter
from .paused_queues import paused_queues
from .server.launcher import EXIT_GRACE, Launcher

__all__ = ["Worker"]

T = TypeVar("T")
log = logging.getLogger("kiq")
POLL = 0.02  # seconds between two looks at the worker's state (join, wait_until) and at its signals
OVERRAN = 1  # the exit code of a stop that did not end within timeout + EXIT_GRACE (as ``kiq worker``'s)
_OWNER = "_kiq_testing_worker"  # the attribute naming the Worker a thread was started from (its log lines)


class Worker:
    """A worker run by this process's threads until ``stop()`` (or the end of its ``with`` block).

    ``queues`` (names, or ``"name,weight"`` as ``-q`` takes them), ``concurrency``, ``timeout`` (seconds a stop
    waits for running jobs), ``fetch`` and ``plugins`` are the ``kiq worker`` options of the same names; any other
    setting goes in ``settings``; ``require`` names modules to import first (``-r``).
    """

    def __init__(
        self,
        config: Config,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        timeout: float | None = None,
        fetch: str | None = None,
        plugins: Iterable[str] | None = None,
        require: Iterable[str] = (),
        **settings: Any,
    ) -> None:
        options = {"concurrency": concurrency, "timeout": timeout, "fetch": fetch}
        settings.update({name: value for name, value in options.items() if value is not None})
        if queues is not None:
            settings["queues"] = list(queues)
        if plugins is not None:
            settings["plugins"] = list(plugins)
        self.config = Config(**{**config.settings, **settings})
        self.config.capsules.update(config.capsules)
        self.require = list(require)
        self.launcher: Launcher | None = None
        self.exit_code: int | None = None  # once stopped: 0, 3 (held outcomes given up) or 1 (the stop overran)
        self.lines: list[str] = []  # the log lines of the worker's threads, formatted as ``kiq worker`` writes them
        self._signals: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._handler = _LinesHandler(self)

    @property
    def identity(self) -> str:
        """The worker's process identity (``host:pid:hex``) in the process registry: this process's pid, so
        workers of one process tell apart by it."""
        assert self.launcher is not None, "the worker has not started"
        return self.launcher.identity

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> Worker:
        """Start the worker; returns once it runs (raises what stopped its start, e.g. a plugin's ConfigError)."""
        for name in self.require:
            importlib.import_module(name)
        self.config.server = True
        for callback in config_module._server_callbacks:  # what enter_server_mode runs in a worker process
            callback(self.config)
        _capture_logs(self._handler, self.config.log_level)
        self._thread = threading.Thread(target=self._run, name="kiq-testing-worker", daemon=True)
        setattr(self._thread, _OWNER, self)
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            self._thread.join()
            _release_logs(self._handler)
            raise self._failure
        return self

    def _run(self) -> None:
        """The worker's main thread: what ``kiq worker`` runs (kiq.server.swarm.serve), signals from a queue."""
        config_module.worker_config.set(self.config)  # config=None in this thread and those it starts: this worker's
        try:
            launcher = self.launcher = Launcher(self.config, signal_sink=self._signals.put)
            launcher.announce()
            # What the test process holds is not the worker's: frozen first, the Launcher's start-up collection walks
            # only what is new, not every object of the test process (~100 ms a start in a large test suite).
            gc.freeze()
            launcher.run()
        except BaseException as exc:
            self._failure = exc
            self._started.set()
            return
        self._started.set()
        overran = False
        while not launcher.done.is_set():
            try:
                name = self._signals.get(timeout=POLL)
            except queue.Empty:
                pass
            else:
                log.info("got %s", name)
                launcher.handle_signal(name)
            if launcher.overran:
                log.error("the stop did not end within timeout + %.1f s: thread dump follows", EXIT_GRACE)
                launcher.thread_dump()
                overran = True
                break
        self.exit_code = (launcher.exit_code or OVERRAN) if overran else launcher.exit_code
        # the Launcher froze what was loaded (gc.freeze: for a worker process's lifetime), as did the start above; a
        # test process goes on, and what its tests leave behind must stay collectable
        gc.unfreeze()
        # the worker's own config: its connections end with it (a test process starts hundreds of workers, and a
        # worker process forked from it must not inherit thousands of open sockets)
        with contextlib.suppress(Exception):
            self.config.redis.close()
        _release_logs(self._handler)

    def signal(self, name: str) -> None:
        """What a signal asks of a worker process: ``"TERM"`` (stop), ``"TSTP"`` (quiet), ``"TTIN"`` (thread dump)."""
        self._signals.put(name)

    def quiet(self) -> None:
        """Stop fetching new jobs; the running ones finish (TSTP)."""
        self.signal("TSTP")

    def stop(self, timeout: float | None = None) -> int:
        """Stop as TERM stops a worker process (running jobs get ``config.timeout`` seconds, then are requeued) and
        wait for it; returns its exit code. ``timeout``: seconds to wait for the end (default: the stop's own limit
        and a little more); an overrun raises TimeoutError."""
        if self._thread is None:
            raise RuntimeError("the worker has not started")
        if self.exit_code is None:
            self.signal("TERM")
        return self.wait(self.config.timeout + EXIT_GRACE + 2 if timeout is None else timeout)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker to end by itself (a remote TERM, say) and return its exit code."""
        assert self._thread is not None, "the worker has not started"
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the worker {self.identity} did not end within {timeout} s")
        assert self.exit_code is not None
        return self.exit_code

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.running:
            self.stop()

    # -- waiting --------------------------------------------------------------------------------------
    def join(self, timeout: float = 30.0) -> None:
        """Wait until the worker is idle: its queues (the unpaused ones) empty, no job running, no scheduled job or
        retry due that its poller would move to a queue. Raises TimeoutError after ``timeout`` seconds."""
        last: list[int] = []

        def settled() -> bool:  # idle twice in a row, with no job ended between: a job fetched is not lost sight of
            if not self.idle():
                last.clear()
                return False
            ended = self._ended()
            if last == [ended]:
                return True
            last[:] = [ended]
            return False

        self.wait_until(settled, timeout, what="the worker to be idle")

    def idle(self) -> bool:
        """No job running, nothing waiting in the queues it serves (but paused ones), nothing due to move."""
        launcher = self.launcher
        assert launcher is not None, "the worker has not started"
        if any(slot.unit is not None or slot.work is not None for m in launcher.managers for slot in m.slots()):
            return False
        redis = self.config.redis
        keys = keyspace(redis)
        paused = paused_queues(redis).keys()
        served = {keys.queue(name) for capsule in launcher.capsules for name, _ in capsule.queues} - paused
        if any(redis.llen(key) for key in served):
            return False
        if launcher.quieted:  # its poller has stopped: what is due stays where it is
            return True
        now = time.time()
        return not any(redis.zcount(keys.key(name), "-inf", now) for name in (SCHEDULE, RETRY))

    def _ended(self) -> int:
        launcher = self.launcher
        assert launcher is not None
        return sum(runner.processed for manager in launcher.managers for runner in manager.runners)

    def wait_until(self, predicate: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
        """Poll ``predicate`` until it returns something truthy (which is returned); TimeoutError after ``timeout``
        seconds, or when the worker ended before."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if not self.running:
                raise TimeoutError(f"the worker ended while waiting for {what or predicate}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what or predicate}")
            time.sleep(POLL)

    def output(self) -> str:
        """The log lines the worker's threads wrote so far, one per line."""
        return "".join(f"{line}\n" for line in list(self.lines))


class _LinesHandler(logging.Handler):
    """Keeps the records of one worker's threads (and of the threads they started), formatted as the worker's
    ``log_format`` setting has ``kiq worker`` write them."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker.config.log_level)
        self.worker = worker
        self.addFilter(ContextFilter())
        self.setFormatter(JsonFormatter() if worker.config.log_format == "json" else PlainFormatter())

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(threading.current_thread(), _OWNER, None) is self.worker and bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.worker.lines.append(self.format(record))
        except Exception:
            self.handleError(record)


# The threads a worker starts are its own (their log lines are its, and config=None in them means its config): while
# a Worker runs, Thread.start hands the starting thread's owner on to the new thread. Undone when no Worker runs.
_lock = threading.Lock()
_handlers: list[_LinesHandler] = []
_saved: dict[str, Any] = {}


def _owned_start(thread: threading.Thread) -> None:
    owner: Worker | None = getattr(threading.current_thread(), _OWNER, None)
    if owner is not None:
        setattr(thread, _OWNER, owner)
        run = thread.run

        def run_as_owned() -> None:  # a new thread starts with empty context variables
            config_module.worker_config.set(owner.config)
            run()

        thread.run = run_as_owned  # type: ignore[method-assign]
    _saved["start"](thread)


def _capture_logs(handler: _LinesHandler, level: str) -> None:
    """Add ``handler`` to the root logger, which lets ``level`` through while a worker runs (as ``kiq worker`` sets
    it), and tag the threads the workers start."""
    root = logging.getLogger()
    with _lock:
        if not _handlers:
            _saved.update(start=threading.Thread.start, level=root.level)
            threading.Thread.start = _owned_start  # type: ignore[method-assign,assignment]
        _handlers.append(handler)
        root.addHandler(handler)
        root.setLevel(min(root.getEffectiveLevel(), logging.getLevelName(level)))


def _release_logs(handler: _LinesHandler) -> None:
    root = logging.getLogger()
    with _lock:
        if handler not in _handlers:
            return
        _handlers.remove(handler)
        root.removeHandler(handler)
        if not _handlers:
            threading.Thread.start = _saved["start"]  # type: ignore[method-assign]
            root.setLevel(_saved["level"])
