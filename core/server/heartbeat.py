"""The worker's heartbeat: Sidekiq 7's process registry, the counters, and the remote signals.

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
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..failures import TRANSIENT
from ..fetcher import Capsule
from ..keys import PROCESS_TTL, PROCESSES, STATS_TTL, keyspace, signals_key, stat_key, work_key
from ..payload import dumps
from ..pipeline import follow_new_master
from ..redis import pool_of
from ..version import __version__
from .manager import Manager
from .metrics import MetricsFlusher, Recorder
from .outcomes import RedisOutage
from .runner import JobRunner

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")
# seconds between two questions to the Sentinels about the master (between heartbeats): bounds how long a worker
# fetches from a master the Sentinels replaced (docs/guide/redis.md)
MASTER_CHECK_INTERVAL = 1.0


class Heartbeat:
    """A worker's heartbeat thread, from ``start()`` to ``stop()``; ``beat()`` is one beat.

    ``signal_sink`` receives the name of a remote signal (``"TSTP"``, ``"TERM"``, ``"TTIN"``) a beat found.
    """

    def __init__(
        self,
        config: Config,
        identity: str,
        managers: list[Manager],
        outage: RedisOutage,
        signal_sink: Callable[[str], None],
        swarm: tuple[int, int | None] | None = None,
    ) -> None:
        self.config = config
        self.identity = identity
        self.managers = managers
        self.capsules: list[Capsule] = [manager.capsule for manager in managers]
        self.outage = outage
        self.signal_sink = signal_sink
        self.swarm = swarm  # (parent pid, index) of a swarm's child (kiq.server.swarm)
        self.started_at = time.time()
        self.quiet = False  # what the process hash shows
        self.metrics = MetricsFlusher(config) if config.metrics else None
        self._info: str | None = None
        self._flushed = (0, 0)  # processed, failed already added to the stat keys
        self._beat_now = threading.Event()  # wakes the thread early: a quiet shows at once
        self._ended = False
        self._thread: threading.Thread | None = None
        self._master: tuple[str, int] | None = None  # with Sentinel: the master's address at the last beat

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kiq-heartbeat", daemon=True)
        self._thread.start()

    def show_quiet(self) -> None:
        """``quiet`` in the process hash, with a beat now: it would otherwise wait for the next beat, up to
        heartbeat_interval later, and `kiq processes` or Sidekiq's Web UI would show a process told TSTP before a
        deploy as running."""
        self.quiet = True
        self._beat_now.set()

    def stop(self, timeout: float) -> None:
        """End the thread (after the beat under way, waiting up to ``timeout`` s for it), write the final counters
        and take this process out of the registry."""
        self._ended = True
        self._beat_now.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._clear()

    def _loop(self) -> None:
        tick = functools.partial(
            self.config.plugins.notify, "kiq_loop_tick"
        )  # for liveness probes: when this loop comes round again
        while not self._ended:
            self._beat_now.clear()  # before the beat: a wake-up during it (a quiet) brings another one at once
            tick(name="heartbeat", due_within=0.0, config=self.config)  # due now: the beat must end in time
            self.beat()
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

    def beat(self) -> None:
        """One beat: flush the counters, write ``<identity>:work`` and the process hash, run a remote signal;
        inside the ``kiq_operation`` hook's context managers (name ``"heartbeat"``)."""
        plugins = self.config.plugins
        try:
            with plugins.enter(plugins.notify("kiq_operation", name="heartbeat", config=self.config)):
                self._beat()
        except Exception as exc:  # nothing may end the heartbeat thread
            self.config.handle_exception(exc, {"context": "heartbeat"})

    def _beat(self) -> None:
        processed, failed = self.totals()
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
                "quiet": "true" if self.quiet else "false",
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

    def totals(self) -> tuple[int, int]:
        """Jobs processed and failed by this process so far."""
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

    def _clear(self) -> None:
        """Final counters and job metrics out, and this process out of the registry (best effort: Redis may be
        down)."""
        try:
            self._flush_stats(*self.totals())
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


def _rss_kb() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
