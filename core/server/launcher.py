"""The Launcher runs a worker: the capsules' managers, the scheduled-job poller and the heartbeat.

Every ``heartbeat_interval`` seconds the heartbeat writes Sidekiq 7's process registry, so Sidekiq's Web UI and
``kiq processes`` list this process: ``SADD processes <identity>``; HASH ``<identity>`` with ``info`` (JSON),
``busy``, ``beat``, ``quiet``, ``rss``, ``rtt_us`` (expires in 60 s); HASH ``<identity>:work`` (thread id →
``{"queue", "payload", "run_at"}``, from the processors' in-memory state); it adds the processed/failed
counters to ``stat:processed``/``stat:failed`` and the daily ``stat:*:YYYY-MM-DD`` keys, and the per-class job
metrics to Sidekiq's metrics keys (kiq.server.metrics); and it pops a signal (TSTP, TERM, TTIN) that the API
left in ``<identity>-signals``.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, KiqError
from ..failures import TRANSIENT
from ..fetcher import Capsule
from ..job_registry import registry
from ..keys import PROCESS_TTL, PROCESSES, STATS_TTL, keyspace, signals_key, stat_key, work_key
from ..payload import dumps, new_jid
from ..pipeline import follow_new_master
from ..redis import pool_of
from ..version import __version__
from .manager import Manager, capsules_for
from .metrics import MetricsFlusher, Recorder
from .outcomes import OutcomeKeeper, RedisOutage
from .runner import JobRunner
from .scheduled import Poller
from .unserved_queues import warn_about_unserved_queues

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")
# seconds between two questions to the Sentinels about the master (between heartbeats): bounds how long a worker
# fetches from a master the Sentinels replaced (docs/guide/redis.md)
MASTER_CHECK_INTERVAL = 1.0


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
        self.quieted = False
        self.started_at = time.time()
        self._info: str | None = None
        self._flushed = (0, 0)  # processed, failed already added to the stat keys
        self.metrics = MetricsFlusher(config) if config.metrics else None
        self._beat_now = threading.Event()  # wakes the heartbeat thread early: a quiet shows at once
        self._beats_ended = False
        self._heartbeat: threading.Thread | None = None
        self._poller: Poller | None = None
        self._stopped = False
        self._stop_began = 0.0
        self.exit_by = float("inf")  # monotonic: when a stop must have ended (EXIT_GRACE)
        self._master: tuple[str, int] | None = None  # with Sentinel: the master's address at the last heartbeat
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
        self._heartbeat = threading.Thread(target=self._beat_loop, name="kiq-heartbeat", daemon=True)
        self._heartbeat.start()
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
        # beat now: "quiet" in the process hash would otherwise wait for the next beat, up to heartbeat_interval
        # later, and `kiq processes` or Sidekiq's Web UI would show a process told TSTP before a deploy as running
        self._beat_now.set()
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
        self._beats_ended = True
        self._beat_now.set()
        if self._heartbeat is not None:  # it ends after the beat under way
            self._heartbeat.join(max(0.0, self.exit_by - time.monotonic()))
        self._clear_heartbeat()
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
        log.warning("waiting up to %.1f s for Redis to take %d held job outcomes", deadline - time.monotonic(),
                    keeper.held)  # fmt: skip
        if keeper.wait(self._cut_short.is_set, deadline - time.monotonic()):
            return
        self.unwritten = keeper.give_up()
        log.error("%d job outcomes could not be written to Redis before the stop (lines above); exiting with 3",
                  self.unwritten)  # fmt: skip

    def stop_now(self) -> None:
        """Cut a stop short (a second TERM/INT): requeue the jobs still running now and interrupt them."""
        log.warning("stopping now: the running jobs are requeued")
        self._cut_short.set()

    # -- heartbeat ------------------------------------------------------------------------------------
    def _beat_loop(self) -> None:
        tick = functools.partial(
            self.config.plugins.notify, "kiq_loop_tick"
        )  # for liveness probes: when this loop comes round again
        while not self._beats_ended:
            self._beat_now.clear()  # before the beat: a wake-up during it (a quiet) brings another one at once
            tick(name="heartbeat", due_within=0.0, config=self.config)  # due now: the beat must end in time
            self.heartbeat()
            tick(name="heartbeat", due_within=self.config.heartbeat_interval, config=self.config)
            self._wait_for_next_beat()
        tick(name="heartbeat", due_within=None, config=self.config)

    def _wait_for_next_beat(self) -> None:
        """Until the next beat is due or woken; with Sentinel, asking every ``MASTER_CHECK_INTERVAL`` whether the
        master changed: a worker that fetches from a demoted master runs every job it takes there again."""
        deadline = time.monotonic() + self.config.heartbeat_interval
        follow = self._follows_master_at_once()
        while (remaining := deadline - time.monotonic()) > 0:
            if self._beat_now.wait(min(remaining, MASTER_CHECK_INTERVAL) if follow else remaining):
                return
            self._note_failover()

    def _follows_master_at_once(self) -> bool:
        """Whether this worker moves to a new master as soon as the Sentinels name it: with Sentinel and
        ``push_replicas`` (docs/guide/redis.md, "Failover"). Without ``push_replicas`` a job pushed to the old master
        after the promotion exists there only, until the old master is demoted and discards it: a worker that goes
        on fetching from the old master until then runs such jobs (and runs again the ones the new master still
        has), one that left at once would lose them. With ``push_replicas`` such a push raised NotReplicated."""
        return bool(self.config.push_replicas) and hasattr(pool_of(self.config.redis), "get_master_address")

    def heartbeat(self) -> None:
        """One beat: flush the counters, write ``<identity>:work`` and the process hash, run a remote signal;
        inside the ``kiq_operation`` hook's context managers (name ``"heartbeat"``)."""
        plugins = self.config.plugins
        try:
            with plugins.enter(plugins.notify("kiq_operation", name="heartbeat", config=self.config)):
                self._beat()
        except Exception as exc:  # nothing may end the heartbeat thread
            self.config.handle_exception(exc, {"context": "heartbeat"})

    def _beat(self) -> None:
        processed, failed = self._totals()
        redis = self.config.redis
        keys = keyspace(redis)
        key = keys.key(self.identity)
        try:
            self._flush_stats(processed, failed)
            work: dict[Any, Any] = {
                slot.tid: dumps({"queue": entry[0], "payload": entry[1], "run_at": entry[2]})
                for manager in self.managers
                for slot in manager.slots()
                if (entry := slot.work) is not None
            }
            work_hash = keys.key(work_key(self.identity))
            pipe = redis.pipeline(transaction=True)
            pipe.unlink(work_hash)
            if work:
                pipe.hset(work_hash, mapping=work)
                pipe.expire(work_hash, PROCESS_TTL)
            pipe.execute()
            started = time.perf_counter()
            redis.ping()
            rtt_us = int((time.perf_counter() - started) * 1_000_000)
            pipe = redis.pipeline(transaction=True)
            pipe.sadd(keys.key(PROCESSES), self.identity)
            pipe.exists(key)
            fields: dict[Any, Any] = {
                "info": self.info_json(),
                "concurrency": sum(capsule.concurrency for capsule in self.capsules),  # Sidekiq 8.1.2+ reads it here
                "busy": len(work),
                "beat": time.time(),
                "rtt_us": rtt_us,
                "quiet": "true" if self.quieted else "false",
                "rss": _rss_kb(),
            }
            pipe.hset(key, mapping=fields)
            pipe.expire(key, PROCESS_TTL)
            pipe.rpop(keys.key(signals_key(self.identity)))
            signal_name = pipe.execute()[-1]
        except Exception as exc:
            self.outage.failed(exc, "heartbeat")
            signal_name = None
        else:
            if self.outage.down_since is not None:
                self.outage.recovered("heartbeat")
        if self.metrics is not None:
            self._flush_metrics()
        # also when the registry write failed (e.g. Redis at maxmemory refuses HSET): the reliable fetcher's
        # liveness key must not expire under a live process
        for manager in self.managers:
            try:
                manager.fetcher.heartbeat()
            except Exception as exc:
                if isinstance(exc, TRANSIENT):  # part of the outage, logged once
                    self.outage.failed(exc, "fetcher heartbeat")
                else:
                    self.config.handle_exception(
                        exc, {"context": f"fetcher heartbeat of capsule {manager.capsule.name}"}
                    )
            else:
                if self.outage.down_since is not None:
                    self.outage.recovered("fetcher heartbeat")
        self._note_failover()
        self.config.plugins.notify("kiq_heartbeat", config=self.config)
        if signal_name:
            log.info("received remote signal %s", signal_name)
            self.signal_sink(signal_name)

    def _note_failover(self) -> None:
        """With Sentinel, when the master changed: log it once and, with ``push_replicas``, move every connection to
        the new one (``kiq.pipeline.follow_new_master``). Asks the Sentinels at each heartbeat, and with
        ``push_replicas`` every ``MASTER_CHECK_INTERVAL`` between; nothing for other URLs."""
        master_address = getattr(pool_of(self.config.redis), "get_master_address", None)
        if master_address is None:
            return
        try:
            current = tuple(master_address())
            if self._master is not None and current != self._master:
                log.warning("Redis failed over: the master is now %s:%s (was %s:%s)", *current, *self._master)
                if self._follows_master_at_once():
                    follow_new_master(self.config.redis)
        except Exception:  # Sentinels unreachable: the outage is reported by the Redis calls themselves
            return
        self._master = current

    def _totals(self) -> tuple[int, int]:
        runners = self._runners()
        return sum(runner.processed for runner in runners), sum(runner.failed for runner in runners)

    def _flush_metrics(self) -> None:
        """The job metrics, apart from the registry: a server that refuses only these writes (an ACL, a proxy
        without MULTI) must not drop this process from the registry. Refused, the counts wait for the next beat."""
        assert self.metrics is not None
        try:
            self.metrics.flush(self._recorders())
        except Exception as exc:
            self.outage.failed(exc, "heartbeat metrics")
        else:
            if self.outage.down_since is not None:
                self.outage.recovered("heartbeat metrics")

    def _recorders(self) -> list[Recorder]:
        return [recorder for runner in self._runners() if (recorder := runner.metrics) is not None]

    def _runners(self) -> list[JobRunner]:
        return [runner for manager in self.managers for runner in manager.runners]

    def _flush_stats(self, processed: int, failed: int) -> None:
        """Add the counts since the last successful flush (kept for the next beat when Redis fails)."""
        done, fails = processed - self._flushed[0], failed - self._flushed[1]
        if done == 0 and fails == 0:
            return
        day = time.strftime("%Y-%m-%d", time.gmtime())
        keys = keyspace(self.config.redis)
        pipe = self.config.redis.pipeline(transaction=False)
        for name, count in (("processed", done), ("failed", fails)):
            daily = keys.key(stat_key(name, day))
            pipe.incrby(keys.key(stat_key(name)), count)
            pipe.incrby(daily, count)
            pipe.expire(daily, STATS_TTL)
        pipe.execute()
        self._flushed = (processed, failed)

    def _clear_heartbeat(self) -> None:
        """Final counters and job metrics out, and this process out of the registry (best effort: Redis may be
        down)."""
        try:
            self._flush_stats(*self._totals())
            keys = keyspace(self.config.redis)
            pipe = self.config.redis.pipeline(transaction=False)
            pipe.srem(keys.key(PROCESSES), self.identity)
            pipe.unlink(keys.key(self.identity))  # one key per command: a cluster's pipeline takes no more
            pipe.unlink(keys.key(work_key(self.identity)))
            pipe.execute()
        except Exception as exc:
            log.warning("could not remove this process from Redis: %s", exc)
        if self.metrics is not None:
            try:
                self.metrics.flush(self._recorders())
            except Exception as exc:
                log.warning("could not write the last job metrics to Redis: %s", exc)

    def info(self) -> dict[str, Any]:
        """The ``info`` field of the process hash (Sidekiq 8.0.9's ``to_data``, plus ``heartbeat_interval``, so readers
        can tell a killed process, whose hash lives on for 60 s, from a live one: kiq.api.Process.state)."""
        return {
            "hostname": self.identity.rsplit(":", 2)[0],
            "started_at": self.started_at,
            "pid": os.getpid(),
            "tag": self.config.tag or "",
            "concurrency": sum(capsule.concurrency for capsule in self.capsules),
            # Sidekiq 8.0.9+ (launcher.rb to_data, capsule.rb to_h); queues and weights stay for 6.x/7.x readers
            "capsules": {
                capsule.name: {"concurrency": capsule.concurrency, "mode": capsule.mode, "weights": capsule.weights}
                for capsule in self.capsules
            },
            "queues": list(dict.fromkeys(name for capsule in self.capsules for name, _ in capsule.queues)),
            "weights": [capsule.weights for capsule in self.capsules],
            "labels": [],
            "identity": self.identity,
            "version": __version__,
            "embedded": False,
            "heartbeat_interval": self.config.heartbeat_interval,
            **({} if self.swarm is None else {"swarm_parent": self.swarm[0], "swarm_index": self.swarm[1]}),
        }

    def info_json(self) -> str:
        if self._info is None:  # it does not change, so it is encoded once
            self._info = dumps(self.info())
        return self._info

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


def _rss_kb() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
