"""The dead set, as the worker writes it: a job that died goes in (trimmed to ``dead_max_jobs`` and
``dead_timeout``, as Sidekiq's DeadSet#kill), and the death hooks hear of it.

One place for every way a job dies: its retries ran out, it was not retryable, it crashed its worker too often
(reliable fetch), its payload can never run, or an operator killed it (``kiq.api.DeadSet``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from .. import sink
from ..keys import DEAD, keyspace
from ..payload import parse_job

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")


def bury(config: Config, jobstr: str) -> None:
    """Add a job, exactly as it was stored, to the dead set, and trim the set."""
    if sink.current is not None:  # kiq.testing
        sink.current.bury(jobstr)
        return
    now = time.time()
    dead = keyspace(config.redis).key(DEAD)
    pipe = config.redis.pipeline(transaction=True)
    pipe.zadd(dead, {jobstr: now})
    pipe.zremrangebyscore(dead, "-inf", now - config.dead_timeout)
    # keep the newest dead_max_jobs (Sidekiq's "0, -max" keeps one fewer than the setting says)
    pipe.zremrangebyrank(dead, 0, -(config.dead_max_jobs + 1))
    pipe.execute()


def replay_command(config: Config, jobstr: str) -> list[str]:
    """``bury`` as a Redis command, for a log line that must let an operator write it by hand."""
    return ["ZADD", keyspace(config.redis).key(DEAD), repr(time.time()), jobstr]


def notify_death(config: Config, job: dict[str, Any], exc: BaseException | None) -> None:
    """Run the ``kiq_death`` hooks (each on its own: one that fails is reported and the others run)."""
    config.plugins.notify("kiq_death", job=job, exc=exc, config=config)


def kill(config: Config, jobstr: str, exc: BaseException | None = None) -> None:
    """A job died: into the dead set, then the death hooks, unless the payload is not a job at all."""
    bury(config, jobstr)
    job = parse_job(jobstr)
    if job is None:
        log.error("a payload that is not a job went to the dead set: %.200r", jobstr)
        return
    notify_death(config, job, exc)
