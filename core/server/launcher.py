"""The Launcher runs a worker: the capsules' managers, the scheduled-job poller and the heartbeat
(kiq.server.heartbeat); it starts them, quiets and stops them, and acts on the signals.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ConfigError, KiqError
from ..fetcher import Capsule
from ..job_registry import registry
from ..payload import new_jid
from ..version import __version__
from .heartbeat import Heartbeat
from .manager import Manager, capsules_for
from .outcomes import OutcomeKeeper, RedisOutage
from .scheduled import Poller
from .unserved_queues import warn_about_unserved_queues

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")


def make_identity() -> str:
    """``hostname:pid:hex12``, Sidekiq 7's process identity (``DYNO`` names the host on Heroku)."""
    hostname = os.environ.get("DYNO") or socket.gethostname()
    return f"{hostname}:{os.getpid()}:{new_jid()[:12]}"


# What a signal asks of a worker, whether it comes from the OS or from the API through the heartbeat
# (Sidekiq's set, plus HUP: a closed terminal stops the worker gracefully instead of killing it mid-job).
STOP_SIGNALS = ("INT", "TERM", "HUP")
SECOND_STOP_AFTER = 1.0  # seconds: a stop signal this long after the first cuts the stop short
# seconds past ``timeout`` by which a stopping worker has exited, whatever still hangs (a shutdown hook, a call to
# an unresponsive Redis): the running jobs were requeued at ``timeout``, and the managers' unwinding
# (kiq.server.manager.KILL_GRACE) fits in it. So TERM -> exit within ``timeout`` + 2 s (docs/guide/operations.md).
EXIT_GRACE = 1.5
WORKER_SIGNALS = (*STOP_SIGNALS, "TSTP", "TTIN")


class Launcher:
    """Starts and stops a worker's managers, poller and heartbeat.

    ``signal_sink`` receives the name of a remote signal (``"TSTP"``, ``"TERM"``, ``"TTIN"``) found by the
    heartbeat; the CLI routes it to its main loop. The default is ``handle_signal``, right away.
    """

    def __init__(
        self,
        config: Config,
        signal_sink: Callable[[str], None] | None = None,
        swarm: tuple[int, int | None] | None = None,
    ) -> None:
        self.config = config
        self.swarm = swarm  # (parent pid, index) of a swarm's child (kiq.server.swarm)
        self.identity = make_identity()
        config.identity = self.identity
        self.capsules: list[Capsule] = capsules_for(config, self.identity)
        self.outage = RedisOutage(config)
        self.keeper = OutcomeKeeper(config, self.outage)  # job outcomes Redis refused, held until it takes them
        self.managers = [Manager(capsule, self.outage, self.keeper) for capsule in self.capsules]
        self.unwritten = 0  # held job outcomes a stop gave up on (logged at ERROR): the process exits non-zero
        self.signal_sink = signal_sink or self.handle_signal
        self.heartbeat = Heartbeat(config, self.identity, self.managers, self.outage, self.signal_sink, swarm)
        self.quieted = False
        self._poller: Poller | None = None
        self._stopped = False
        self._stop_began = 0.0
        self.exit_by = float("inf")  # monotonic: when a stop must have ended (EXIT_GRACE)
        self._cut_short = threading.Event()  # a second TERM: requeue the running jobs now
        self.done = threading.Event()  # set when a stop has finished

    # -- lifecycle ------------------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopped

    def announce(self) -> None:
        """The start line: who, what from where."""
        config = self.config
        log.info(
            "kiq %s starting: identity=%s concurrency=%d queues=%s fetch=%s redis=%s jobs=%d%s",
            __version__, self.identity, config.concurrency,
            ",".join(f"{name},{weight}" if weight else name for name, weight in config.queues),
            config.fetch, config.redis_url or f"embedded ({config.embedded_dir})", len(registry.names()),
            "" if self.swarm is None else f" swarm_parent={self.swarm[0]} swarm_index={self.swarm[1]}",
        )  # fmt: skip

    def run(self) -> None:
        """Run the plugins' ``kiq_check`` (a ConfigError stops the start here), fire ``kiq_startup``, then start the
        heartbeat, the poller and the processors; returns at once."""
        try:
            self.config.plugins.hook.kiq_check(config=self.config)
        except KiqError:
            raise
        except Exception as exc:  # a check that failed instead of saying what is wrong
            raise ConfigError(f"a plugin's start-up check failed: {type(exc).__name__}: {exc}") from exc
        warn_about_unserved_queues(self.capsules)
        self.config.plugins.notify("kiq_startup", config=self.config)
        # What is loaded by now (modules, classes, plugins) lives as long as the process: the cyclic GC need not walk
        # it again. Otherwise every full collection walks all of it, a ~15 ms pause of every thread, which the
        # jobs waiting then see (p99 latency under load: 8 ms with it, under 1 ms without; docs/performance.md).
        gc.collect()
        gc.freeze()
        self.heartbeat.start()
        self._poller = Poller(self.config, self.outage)
        self._poller.start()
        for manager in self.managers:
            manager.start()

    def quiet(self) -> None:
        """Stop fetching new jobs (TSTP); running jobs finish. The process hash shows ``quiet`` = "true"."""
        if self.quieted:
            return
        self.quieted = True
        log.info("quieting: no new jobs will be fetched")
        for manager in self.managers:
            manager.quiet()
        if self._poller is not None:
            self._poller.terminate()
        self.heartbeat.show_quiet()
        self.config.plugins.notify("kiq_quiet", config=self.config)

    def stop(self) -> None:
        """Quiet, wait up to ``timeout`` s for running jobs, requeue and interrupt the rest, then deregister."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_began = time.monotonic()
        deadline = time.monotonic() + self.config.timeout
        self.exit_by = deadline + EXIT_GRACE
        self.quiet()
        log.info("shutting down: waiting up to %.1f s for running jobs", self.config.timeout)
        stoppers = [
            threading.Thread(target=manager.stop, args=(deadline, self._cut_short)) for manager in self.managers
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        self._settle_outcomes(deadline)
        self.config.plugins.notify("kiq_shutdown", config=self.config)
        for manager in self.managers:  # after the hooks: a plugin may still release held acknowledgements
            manager.close()
        self.keeper.close()
        self.heartbeat.stop(max(0.0, self.exit_by - time.monotonic()))
        log.info("bye")
        self.done.set()

    @property
    def overran(self) -> bool:
        """A stop began and did not end by ``exit_by``: the process should exit anyway."""
        return time.monotonic() > self.exit_by and not self.done.is_set()

    @property
    def exit_code(self) -> int:
        """0, or 3 when a stop gave up held job outcomes (each logged at ERROR with its payload)."""
        return 3 if self.unwritten else 0

    def _settle_outcomes(self, deadline: float) -> None:
        """Wait for held job outcomes until the stop's deadline (or a second TERM), then give up what Redis still
        refuses: each job's payload at ERROR, in a line that can be replayed (docs/guide/guarantees.md)."""
        keeper = self.keeper
        if not keeper.held:
            return
        left = max(0.0, deadline - time.monotonic())
        log.warning("waiting up to %.1f s for Redis to take %d held job outcomes", left, keeper.held)
        if keeper.wait(self._cut_short.is_set, deadline - time.monotonic()):
            return
        self.unwritten = keeper.give_up()
        log.error("%d job outcomes could not be written to Redis before the stop (lines above); exiting with 3",
                  self.unwritten)  # fmt: skip

    def stop_now(self) -> None:
        """Cut a stop short (a second TERM/INT): requeue the jobs still running now and interrupt them."""
        log.warning("stopping now: the running jobs are requeued")
        self._cut_short.set()

    # -- signals and diagnostics ----------------------------------------------------------------------
    def handle_signal(self, name: str) -> None:
        """INT/TERM/HUP: stop (on a thread of its own; a second one cuts the wait for running jobs short),
        TSTP: quiet, TTIN: thread dump."""
        if name in STOP_SIGNALS:
            if self._stopped:
                # the same stop can arrive twice at once: Ctrl-C or systemd signal a swarm's parent and children
                # together, and the parent passes it on; only a later one means "now"
                if time.monotonic() - self._stop_began > SECOND_STOP_AFTER:
                    self.stop_now()
            else:
                threading.Thread(target=self.stop, name="kiq-stop", daemon=True).start()
        elif name == "TSTP":
            self.quiet()
        elif name == "TTIN":
            self.thread_dump()
        else:
            log.warning("ignoring unknown signal %r", name)

    def thread_dump(self) -> None:
        """Log every thread's stack (TTIN), to see where busy jobs are."""
        frames = sys._current_frames()
        for thread in threading.enumerate():
            frame = frames.get(thread.ident) if thread.ident is not None else None
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
            log.warning("thread %s (%s)\n%s", thread.name, thread.ident, stack.rstrip())
