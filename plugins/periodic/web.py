"""The periodic plugin's dashboard tab, "Periodic" (``kiq.contrib.web``; see ``kiq.tabs``): what ``kiq periodic``
lists, the periodic jobs the live workers on this Redis run with their next and last run; and below, any periodic job
this config declares that no live worker runs (a worker started without the plugin, or without that job).

Read from Redis at each request (two hashes, one entry per periodic job); Redis away raises, and the dashboard shows
the error in the tab.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import kiq
import kiq.ext
from kiq.api import display_arguments
from kiq.tabs import Cell, Heading, Tab, Table, TabRequest, TabView, Text, When

from .entries import PeriodicJob
from .store import LAST_TICKS, statuses

COLUMNS = ["Name", "Cron", "Time zone", "Job class", "Queue", "Arguments", "Next run", "Last enqueued"]


def periodic_tab(config: kiq.Config, declared: Callable[[], list[PeriodicJob]]) -> Tab:
    """The "periodic" tab on ``config``'s Redis; ``declared()`` gives the periodic jobs this config declares."""
    return Tab("periodic", "Periodic", lambda request: render(config, declared, request))


def render(config: kiq.Config, declared: Callable[[], list[PeriodicJob]], request: TabRequest) -> TabView:
    if request.path:
        raise LookupError(f"no page {request.path!r:.80} in the periodic tab")
    found = statuses(config.redis, time.time())
    rows = [
        [*described(status.job), When(status.next_run), last_run(status.last_run)]
        for status in found  # soonest first
    ]
    blocks: list[Any] = [Table(COLUMNS, rows, empty="No periodic jobs: no live worker on this Redis runs any.")]
    running = {status.job.id for status in found}
    idle = [job for job in declared() if job.id not in running]
    if idle:
        last_ticks = config.redis.hmget(kiq.ext.keyspace(config.redis).key(LAST_TICKS), [job.id for job in idle])
        blocks += [
            Heading("Declared here, run by no live worker"),
            Text(
                "This config declares these periodic jobs, but no live worker on this Redis runs them: start the "
                "workers with the periodic plugin and the same schedule."
            ),
            Table(
                [*COLUMNS[:-2], COLUMNS[-1]],
                [
                    [*described(job), last_run(None if last is None else float(last))]
                    for job, last in zip(idle, last_ticks, strict=True)
                ],
            ),
        ]
    return TabView("Periodic", blocks)


def described(job: PeriodicJob) -> list[Cell]:
    return [job.name, job.cron, job.tz, job.job, job.queue or "(the job's)", display_arguments(job.args, job.kwargs)]


def last_run(tick: float | None) -> Cell:
    return "never" if tick is None else When(tick)
