"""The scheduler thread every worker runs: it sleeps until the next tick of any periodic job, claims the tick in
Redis (see store.py) and, when it won the claim, pushes the job through the client (so client middleware applies).

Ticks missed while no worker ran are not replayed: a starting scheduler begins with the first tick after it starts
(Sidekiq Enterprise's rule), and one that falls behind (a long pause) skips to the next tick after now.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis as redis_py

import kiq
import kiq.ext

from .entries import PeriodicJob, shown
from .store import CLAIM

log = logging.getLogger("kiq.periodic")

MAX_MISSED_COUNTED = 10_000


class Scheduler:
    """Enqueues ``jobs`` (each with the class it names, found in the registry at start) at their ticks."""

    def __init__(self, config: kiq.Config, jobs: list[tuple[PeriodicJob, type[kiq.Job]]]) -> None:
        self.config = config
        self.jobs = jobs
        # ticks this process skipped (it fell behind them) or could not push, per job name: kiq_metrics; another
        # worker may have enqueued them
        self.missed: dict[str, int] = {}
        self._client = kiq.Client(config)
        self._claim = config.redis.register_script(CLAIM.source)
        self._claim_keys = CLAIM.keys(kiq.ext.keyspace(config.redis))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiq-periodic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopped.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop scheduling; a push in progress finishes first."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        started = time.time()
        plan = [job.next_tick(started) for job, _ in self.jobs]
        while True:
            if self._stopped.wait(max(0.0, min(plan) - time.time())):
                return
            now = time.time()
            for index, tick in enumerate(plan):
                if tick <= now:
                    job, job_class = self.jobs[index]
                    self.fire(job, job_class, tick)
                    plan[index] = job.next_tick(time.time())  # ticks missed meanwhile are skipped...
                    self._count_missed(job, job.next_tick(tick), plan[index])  # ...and counted

    def _count_missed(self, job: PeriodicJob, first: float, resumed: float) -> None:
        """Count the ticks of ``job`` from ``first`` up to (not with) ``resumed``, the one it resumes at (at most
        MAX_MISSED_COUNTED per fall: a per-second job paused for a day is not walked tick by tick)."""
        missed, tick = 0, first
        while tick < resumed and missed < MAX_MISSED_COUNTED:
            missed += 1
            tick = job.next_tick(tick)
        if missed:
            self.missed[job.name] = self.missed.get(job.name, 0) + missed

    def fire(self, job: PeriodicJob, job_class: type[kiq.Job], tick: float) -> str | None:
        """Claim ``tick`` of ``job`` and, if this process won it, push the job; its jid, else None."""
        try:
            if not self._claim(keys=self._claim_keys, args=[job.id, int(tick)]):
                return None
            jid = self._client.push(self.item(job, job_class, tick))
        except Exception as exc:  # Redis away, or a push refused: reported, and the next tick comes as usual
            self.missed[job.name] = self.missed.get(job.name, 0) + 1
            context = f"periodic job {job.name!r}: enqueueing its tick of {shown(tick, job.tz)} failed"
            self.config.handle_exception(exc, {"context": context}, traceback=not isinstance(exc, redis_py.RedisError))
            return None
        log.info("periodic job %r (%s) enqueued for %s: %s", job.name, job.cron, shown(tick, job.tz), jid)
        return jid

    @staticmethod
    def item(job: PeriodicJob, job_class: type[kiq.Job], tick: float) -> dict[str, Any]:
        """The push: the job with its arguments, and ``periodic_at``, the tick it runs for (epoch seconds)."""
        item: dict[str, Any] = {"class": job_class, "args": list(job.args), "periodic_at": tick}
        if job.kwargs:  # checked and converted by the push, as perform_async's
            item["kwargs"] = dict(job.kwargs)
        if job.queue is not None:
            item["queue"] = job.queue
        return item
