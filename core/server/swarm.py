"""Running worker processes: ``serve`` runs one (a Launcher until it is stopped); a ``Swarm`` forks ``processes``
children after the app was imported (copy-on-write, Sidekiq Enterprise's swarm) and supervises them.

Each child is a full worker with its own identity in the process registry (its ``info`` names its parent and its
index). The parent restarts a child that dies (with a backoff that grows while children keep dying young, logged),
replaces a child whose memory grew past ``max_memory_mb`` (stopped gracefully first), and passes signals on: TERM,
INT and HUP stop every child within ``timeout`` (a second one cuts it short), TSTP quiets them, TTIN dumps their
threads. A child that exits by itself with status 0 (stopped from the API or Sidekiq's Web UI), or 3 (stopped while
Redis still refused its held job outcomes: docs/guide/guarantees.md), is not replaced; when no child is left the
parent exits, with status 3 if any child did (its ERROR lines hold the job outcomes to replay), else 0. Children
stop gracefully when the parent is gone (``PR_SET_PDEATHSIG``, and a check of the parent pid each loop), so a killed
parent leaves no orphan fetching jobs; with reliable fetch even ``kill -9`` of the whole tree loses no job.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import time
from dataclasses import dataclass, field

from ..backoff import Backoff
from ..config import Config
from .launcher import EXIT_GRACE, STOP_SIGNALS, Launcher
from .signals import SignalPipe

log = logging.getLogger("kiq")

YOUNG = 10.0  # seconds: a child that dies younger counts toward a growing restart delay
RESTART_DELAY = 0.5  # seconds before a child that died older than YOUNG is started again
YOUNG_RESTART_BACKOFF = (1.0, 30.0)  # the same for a child dying young, again and again: the first and the cap
# seconds past ``timeout`` after which the parent kills the children still there: each child exits by itself
# within EXIT_GRACE (its jobs requeued at ``timeout``); this only ends a child stuck beyond that (one that ignores
# TERM, say), early enough that the parent, which reaps the killed children at once, is gone within timeout + 2 s
KILL_AFTER = EXIT_GRACE + 0.1
POLL = 0.5  # seconds between two looks at the children
STOP_POLL = 0.1  # the same while they stop: the parent exits within STOP_POLL of its last child
OVERRAN = 1  # the exit status of a worker whose stop did not end within EXIT_GRACE (a hook or Redis hanging)
UNWRITTEN = 3  # the exit status of a worker whose stop gave up held job outcomes (Launcher.exit_code)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def serve(config: Config, parent: int | None = None, index: int | None = None) -> int:
    """Run a worker in this process until a stop signal (or, in a swarm's child, the parent's end) ends it."""
    with SignalPipe() as signals:
        launcher = Launcher(config, signal_sink=signals.send, swarm=None if parent is None else (parent, index))
        launcher.announce()
        launcher.run()
        overran = False
        while not launcher.done.is_set():
            for name in signals.wait(timeout=0.2 if not launcher.stopping else STOP_POLL):
                log.info("got %s", name)
                launcher.handle_signal(name)
            if launcher.overran:  # the jobs were requeued at the timeout; what still hangs must not hold the exit
                log.error("the stop did not end within timeout + %.1f s (a shutdown hook or Redis hanging?): "
                          "exiting anyway; thread dump follows", EXIT_GRACE)  # fmt: skip
                launcher.thread_dump()
                overran = True
                break
            if parent is not None and os.getppid() != parent and not launcher.stopping:
                log.warning("the swarm's parent %d is gone: stopping", parent)
                launcher.handle_signal("TERM")
        # an overrun exits with 1, or 3 when held job outcomes were given up (that says more)
        return (launcher.exit_code or OVERRAN) if overran else launcher.exit_code


@dataclass
class Child:
    index: int
    shard: str | None = None  # the shard it serves (its Redis), None: redis_url
    pid: int = 0
    started: float = 0.0
    # the delays before restarting a child that keeps dying within YOUNG seconds of a start
    young_deaths: Backoff = field(default_factory=lambda: Backoff(*YOUNG_RESTART_BACKOFF))
    restart_at: float | None = None  # when a dead child is started again
    replacing: bool = False  # stopped by the parent (memory): started again at once


@dataclass
class Swarm:
    """The parent of ``count`` worker processes."""

    config: Config
    count: int  # per shard
    shards: list[str | None] = field(default_factory=lambda: [None])
    children: list[Child] = field(default_factory=list)
    unwritten: int = 0  # children that exited with UNWRITTEN

    def run(self) -> int:
        stopping_since: float | None = None
        self.config.plugins.hook.kiq_swarm_startup(config=self.config)  # a ConfigError stops the start here
        with SignalPipe() as signals:
            self._signals = signals
            self.children = [
                Child(index, shard) for index, shard in enumerate(s for s in self.shards for _ in range(self.count))
            ]
            for child in self.children:
                self._start(child)
            log.info("swarm of %d worker processes started (parent pid %d)", len(self.children), os.getpid())
            while True:
                for name in signals.wait(timeout=POLL if stopping_since is None else STOP_POLL):
                    log.info("got %s: passing it to the children", name)
                    if name in STOP_SIGNALS and stopping_since is None:
                        stopping_since = time.monotonic()
                        self.config.plugins.notify("kiq_swarm_stopping", config=self.config)
                    self._signal_all(name)
                if stopping_since is not None and time.monotonic() - stopping_since > self.config.timeout + KILL_AFTER:
                    self._signal_all("KILL")  # children that ignore a stop this long are stuck
                    self._reap(stopping=True, block=True)
                else:
                    self._reap(stopping=stopping_since is not None)
                if not any(child.pid for child in self.children) and (
                    stopping_since is not None or all(child.restart_at is None for child in self.children)
                ):
                    log.info("swarm stopped")
                    self.config.plugins.notify("kiq_swarm_shutdown", config=self.config)
                    return UNWRITTEN if self.unwritten else 0
                if stopping_since is None:
                    self._restart_due()
                    self._check_memory()

    def _start(self, child: Child) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: a worker of its own, never back into the parent's loop
            code = 1
            try:
                self._signals.forget()
                _die_with(parent)
                if child.shard is not None:
                    self.config.redis_url = self.config.shard_url(child.shard)
                code = serve(self.config, parent=parent, index=child.index)
            except BaseException:
                log.exception("swarm child %d failed", child.index)
            finally:
                logging.shutdown()
                os._exit(code)
        child.pid, child.started, child.restart_at, child.replacing = pid, time.monotonic(), None, False

    def _signal_all(self, name: str) -> None:
        signum = signal.SIGKILL if name == "KILL" else getattr(signal, f"SIG{name}")
        for child in self.children:
            if child.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    def _reap(self, stopping: bool, block: bool = False) -> None:
        """Collect the children that exited (with ``block``: wait for each, as after a KILL)."""
        for child in self.children:
            if not child.pid:
                continue
            pid, status = os.waitpid(child.pid, 0 if block else os.WNOHANG)
            if pid == 0:
                continue
            code = os.waitstatus_to_exitcode(status)
            child.pid = 0
            self.config.plugins.notify(
                "kiq_swarm_child_exited", config=self.config, index=child.index, pid=pid, code=code
            )
            if code == UNWRITTEN:
                self.unwritten += 1
                log.warning("swarm child %d (pid %d) stopped with held job outcomes unwritten (logged at ERROR)",
                            child.index, pid)  # fmt: skip
            if stopping or (code in (0, UNWRITTEN) and not child.replacing):
                log.info("swarm child %d (pid %d) exited with %d", child.index, pid, code)
                continue  # stopped on purpose (by us, or from the API; only a stop exits with 3): not replaced
            lived = time.monotonic() - child.started
            if lived < YOUNG and not child.replacing:
                delay = child.young_deaths.next()
            else:
                child.young_deaths.reset()
                delay = 0.0 if child.replacing else RESTART_DELAY
            log.warning(
                "swarm child %d (pid %d) exited with %d after %.0f s; restarting in %.1f s",
                child.index, pid, code, lived, delay,
            )  # fmt: skip
            child.restart_at = time.monotonic() + delay

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if not child.pid and child.restart_at is not None and child.restart_at <= now:
                self._start(child)

    def _check_memory(self) -> None:
        limit_kb = self.config.max_memory_mb * 1024
        if not limit_kb:
            return
        for child in self.children:
            if child.pid and not child.replacing and (rss := _rss_kb(child.pid)) > limit_kb:
                log.warning(
                    "swarm child %d (pid %d) uses %d MB, over max_memory_mb %d: stopping it to replace it",
                    child.index, child.pid, rss // 1024, self.config.max_memory_mb,
                )  # fmt: skip
                child.replacing = True
                os.kill(child.pid, signal.SIGTERM)


def _die_with(parent: int) -> None:
    """Have the kernel send this process TERM when its parent dies (Linux); then check the parent did not die
    before that was set."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is not None:
        ctypes.CDLL(libc_name, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # already gone: nothing started yet, nothing to stop
        os._exit(0)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
