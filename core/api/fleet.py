"""The fleet's gauges, read from Redis for a metrics scrape: queue sizes and latencies, the retry, dead and
scheduled set sizes, and (for ``kiq web``'s view of all workers) the processes, their busy threads and their
concurrency from the process registry; plus the plugins' ``"fleet"`` readings (kiq.readings, ``plugin_readings``).
Public API: the metrics plugin's ports, ``kiq web``'s ``/metrics`` and the OTel plugin's observable gauges read
them here, so each shows the same values.

The ``queue`` label is bounded as the ``class`` label is: any producer can add a name to the ``queues`` set, so
only the known queues (served by this config's capsules, or named by a registered job class's ``queue`` option)
get a label of their own; every other name in the set is summed into ``queue="other"`` (its size the sum, its
latency the oldest job's).

Cheap on purpose, as Prometheus (or KEDA, or the OTel plugin's observable gauges) may ask every few seconds from
every worker: two pipelined round trips per read (the names; then one ``LLEN`` and ``LINDEX -1`` per queue and one
``HMGET`` per process), and the result cached for ``CACHE_SECONDS``, so scrapes that come together read once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..job_registry import registry
from ..keys import DEAD, PROCESSES, QUEUES, RETRY, SCHEDULE, keyspace
from ..payload import parse_job
from ..plan import plan_of
from ..readings import Reading
from .records import latency

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")

CACHE_SECONDS = 1.0
OTHER = "other"  # the queue label of every queue name that is not a known queue


class FleetGauges:
    """Reads the gauges; ``processes``: also the registry's ``kiq_processes``, ``kiq_busy_threads`` and
    ``kiq_concurrency`` (a worker's port reports its own instead)."""

    def __init__(self, config: Config, processes: bool = True) -> None:
        self.config = config
        self.processes = processes
        self._cached: tuple[float, list[Reading]] | None = None
        self._lock = threading.Lock()  # concurrent scrapes: one reads, the others wait for its result

    def readings(self) -> list[Reading]:
        """The gauges as of at most ``CACHE_SECONDS`` ago; a Redis error propagates (nothing cached)."""
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < CACHE_SECONDS:
                return self._cached[1]
            readings = self._read() + plugin_readings(self.config, "fleet")
            self._cached = (time.monotonic(), readings)
            return readings

    def _read(self) -> list[Reading]:
        redis = self.config.redis
        keys = keyspace(redis)
        pipe = redis.pipeline(transaction=False)
        pipe.smembers(keys.key(QUEUES))
        for name in (RETRY, DEAD, SCHEDULE):
            pipe.zcard(keys.key(name))
        pipe.smembers(keys.key(PROCESSES))
        queue_names, retries, dead, scheduled, identities = pipe.execute()
        queues = sorted(name for name in queue_names if name)
        processes = sorted(identities) if self.processes else []
        pipe = redis.pipeline(transaction=False)
        for name in queues:
            pipe.llen(keys.queue(name))
            pipe.lindex(keys.queue(name), -1)
        for identity in processes:
            pipe.hmget(keys.key(identity), "info", "busy")
        results = pipe.execute()
        readings = [
            Reading("kiq_retry_set_size", retries, help="jobs in the retry set"),
            Reading("kiq_dead_set_size", dead, help="jobs in the dead set"),
            Reading("kiq_scheduled_set_size", scheduled, help="jobs in the schedule set"),
        ]
        known = known_queues(self.config)
        gauges: dict[str, tuple[int, float]] = {}  # label -> (size, latency)
        for index, name in enumerate(queues):
            size, oldest = results[2 * index], results[2 * index + 1]
            label = name if name in known else OTHER
            total, waited = gauges.get(label, (0, 0.0))
            gauges[label] = (total + size, max(waited, latency(oldest)))
        for label, (size, waited) in gauges.items():
            labels = (("queue", label),)
            readings.append(Reading("kiq_queue_size", size, labels, help="jobs waiting in the queue (LLEN)"))
            readings.append(
                Reading("kiq_queue_latency_seconds", waited, labels, help="seconds the oldest waiting job has waited")
            )
        if self.processes:
            readings.extend(self._registry(results[2 * len(queues) :]))
        return readings

    def _registry(self, hashes: list[list[str | None]]) -> list[Reading]:
        live = busy = concurrency = 0
        for info, busy_threads in hashes:
            attributes = parse_job(info) if info is not None else None
            if attributes is None:  # its hash expired: dead, not yet cleaned up
                continue
            live += 1
            busy += int(busy_threads or 0)
            concurrency += int(attributes.get("concurrency") or 0)
        return [
            Reading("kiq_processes", live, help="worker processes"),
            Reading("kiq_busy_threads", busy, help="job threads (and async jobs) running a job now"),
            Reading("kiq_concurrency", concurrency, help="job threads of the workers"),
        ]


def known_queues(config: Config) -> set[str]:
    """The queues that get a ``queue`` label of their own: those ``config``'s capsules serve and those the job
    classes registered in this process name (their ``queue`` option); a set that grows with code, not with data."""
    known = {name for name, _ in config.queues}
    for queues, _ in config.capsules.values():
        known.update(name for name, _ in queues)
    for name in registry.names():
        job_class = registry.find(name)
        queue = plan_of(job_class).options.get("queue") if job_class is not None else None
        if isinstance(queue, str):
            known.add(queue)
    return known


def plugin_readings(config: Config, scope: str) -> list[Reading]:
    """The plugins' ``kiq_metrics`` readings for ``scope`` (``"process"`` or ``"fleet"``); an implementation that
    returns something else than a list of readings is logged and left out (one that raises is, by the hook's
    isolation)."""
    readings: list[Reading] = []
    for result in config.plugins.notify("kiq_metrics", config=config, scope=scope):
        if result is None:
            continue
        if isinstance(result, list | tuple) and all(isinstance(item, Reading) for item in result):
            readings.extend(result)
        else:
            log.error("a plugin's kiq_metrics returned %.100r, not a list of kiq.ext.Reading: left out", result)
    return readings
