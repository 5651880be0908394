"""The periodic plugin: the ``periodic`` setting, jobs declared in code, and the scheduler a worker runs from its
start to its quiet."""

from __future__ import annotations

import argparse
import difflib
import logging
import time

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .entries import PeriodicJob, from_table, parse_setting
from .scheduler import Scheduler
from .store import prune, publish
from .web import periodic_tab

log = logging.getLogger("kiq.periodic")

SETTINGS = [
    kiq.ext.Setting(
        "periodic",
        [],
        parse_setting,
        "periodic jobs: [[periodic]] tables with cron, class, and optionally args, kwargs, queue, tz, name",
    )
]


class PeriodicPlugin:
    """``plugins = ["periodic"]`` in the workers; every worker runs the schedule, and each tick is enqueued once."""

    def __init__(self) -> None:
        self.declared: list[PeriodicJob] = []  # from code (register), besides the setting's
        self.scheduler: Scheduler | None = None

    def declare(self, job: PeriodicJob) -> None:
        if self.scheduler is not None:
            raise kiq.ConfigError(
                f"periodic job {job.name!r} declared after the worker started: declare periodic jobs in "
                "configure_server or in the periodic setting"
            )
        self.declared.append(job)

    def schedule(self, config: kiq.Config) -> list[PeriodicJob]:
        """Every periodic job of this config: the setting's, then those declared in code."""
        return [*map(from_table, config.get("periodic")), *self.declared]

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_check(self, config: kiq.Config) -> None:
        """A class this worker does not register is left to the workers that do (a kiq.toml shared by workers of
        different job modules, as Celery beat sends a task by name to whoever consumes it), with a WARNING; but a
        near miss of a registered name is a typo and stops the start."""
        unknown = sorted({job.job for job in self.schedule(config) if job.job not in kiq.registry})
        registered = kiq.registry.names()
        typos = [name for name in unknown if difflib.get_close_matches(name, registered, n=1, cutoff=0.75)]
        if typos:
            raise kiq.ConfigError(
                f"periodic jobs name classes this worker does not register: {', '.join(typos)} (registered: "
                f"{', '.join(registered)}); fix the name, or import the modules that define them with -r / require"
            )
        if unknown:
            log.warning(
                "periodic: this worker does not register %s (not imported with -r / require): it leaves those "
                "entries to the workers that do, which enqueue each tick once",
                ", ".join(unknown),
            )

    @kiq.hookimpl
    def kiq_startup(self, config: kiq.Config) -> None:
        jobs = [job for job in self.schedule(config) if job.job in kiq.registry]  # the others: see kiq_check
        if not jobs:
            return
        prune(config.redis, time.time())
        self.scheduler = Scheduler(config, [(job, kiq.registry.get(job.job)) for job in jobs])
        self.scheduler.start()
        self.publish(config)
        log.info("periodic: %d job(s) scheduled", len(jobs))

    @kiq.hookimpl
    def kiq_heartbeat(self, config: kiq.Config) -> None:
        self.publish(config)

    def publish(self, config: kiq.Config) -> None:
        """List this worker's jobs for ``kiq periodic`` while it runs them: for a minute (or three heartbeats, if
        longer) after its start and each heartbeat."""
        if self.scheduler is not None and self.scheduler.running:
            until = time.time() + max(60.0, 3 * config.heartbeat_interval)
            publish(config.redis, [job for job, _ in self.scheduler.jobs], until)

    @kiq.hookimpl
    def kiq_metrics(self, scope: str) -> list[kiq.ext.Reading] | None:
        """Per process: the ticks its scheduler missed, per periodic job (names from the schedule: bounded)."""
        if scope != "process" or self.scheduler is None:
            return None
        help_ = "ticks of a periodic job this worker skipped (it fell behind) or failed to enqueue"
        missed = self.scheduler.missed.copy()
        names = sorted({job.name for job, _ in self.scheduler.jobs})  # every job, 0 until it misses one
        return [
            kiq.ext.Reading("kiq_periodic_ticks_missed_total", missed.get(name, 0), (("job", name),), "counter", help_)
            for name in names
        ]

    @kiq.hookimpl
    def kiq_quiet(self) -> None:
        if self.scheduler is not None:  # a quiet process starts no new work; the other workers go on enqueueing
            self.scheduler.stop()

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        """The "Periodic" tab of the dashboard: the schedule the live workers run (see web.py)."""
        return [periodic_tab(config, lambda: self.schedule(config))]

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)
