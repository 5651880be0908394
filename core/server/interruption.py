"""Jobs that stop themselves at a safe point (``kiq.IterableJob``): what the worker tells them, and what it does
when one stopped.

Such a job (its plan is ``interruptible``, kiq.plan) is not cut off by the time-limit watchdog: it gets the worker's
stopping flag (set at quiet and stop, as Sidekiq's ``interrupted?``) and its time limit (the ``timeout`` option or
``job_timeout``), checks them between two items, saves its progress and raises ``kiq.errors.Interrupted``. The
worker then pushes the payload again, as it was fetched with a new ``enqueued_at`` (Sidekiq's InterruptHandler:
``Client.new.push(hash)``, no retry counted), and acknowledges the fetched copy. That push is a job outcome: if
Redis refuses it, the worker's OutcomeKeeper holds it and retries (kiq.server.outcomes), the job acknowledged only
once it is written. Client middleware do not run on it: it is the same job going on, not a new push (a unique lock
or a batch would count it twice).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..keys import QUEUES, keyspace
from ..payload import dumps, loads, wire_time
from ..plan import plan_of

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import UnitOfWork


def prepare(instance: Any, stopping: threading.Event | None, limit: float) -> float:
    """Hand an interruptible job the stopping flag and its time limit; returns the limit the watchdog enforces
    (0 for such a job: it keeps its limit itself, between items)."""
    if not plan_of(type(instance)).interruptible:
        return limit
    instance.interrupt_when(stopping, limit)
    return 0.0


def repush_command(config: Config, unit: UnitOfWork) -> tuple[str, str]:
    """The queue and the payload the interrupted job goes back with: as fetched, with a new ``enqueued_at``."""
    job: dict[str, Any] = loads(unit.job)
    job["enqueued_at"] = wire_time(time.time(), config.sidekiq_wire)
    queue = job.get("queue")
    return (queue if isinstance(queue, str) and queue else unit.queue_name), dumps(job)


def repush(config: Config, queue: str, payload: str, save: Callable[[], object] | None = None) -> None:
    if save is not None:  # the job's progress first: the re-pushed job must find it
        save()
    keys = keyspace(config.redis)
    with config.redis.pipeline(transaction=False) as pipe:
        pipe.sadd(keys.key(QUEUES), queue)
        pipe.lpush(keys.queue(queue), payload)
        pipe.execute()


def repush_write(
    config: Config, unit: UnitOfWork, save: Callable[[], object] | None = None
) -> tuple[functools.partial[None], list[str]]:
    """The re-push of ``unit``'s job (after ``save``, the job's progress Redis refused at the interruption) as a
    write to make (again, while Redis refuses it) and as the Redis command logged to replay it if the worker stops
    first."""
    queue, payload = repush_command(config, unit)
    command = ["LPUSH", keyspace(config.redis).queue(queue), payload]
    return functools.partial(repush, config, queue, payload, save), command
