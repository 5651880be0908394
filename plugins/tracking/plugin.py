"""The tracking plugin: its settings, middleware and hooks, and the Tracker of the config it belongs to."""

from __future__ import annotations

import argparse
import threading
from contextlib import AbstractContextManager
from typing import Any

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .middleware import (
    TrackingClientMiddleware,
    TrackingServerMiddleware,
    death_update,
    dropped_outcome,
    dropping,
    is_tracked,
    progress_update,
    rows_written_after_bulk,
)
from .tracker import Tracker
from .web import tasks_tab

SETTINGS = [
    kiq.ext.Setting.text(
        "tracking_database_url", "sqlite:///kiq-tracking.db", "SQLAlchemy URL of the tracking database"
    ),
    kiq.ext.Setting.number("tracking_flush_interval", 0.1, minimum=0.001, help="seconds between batched status writes"),
    kiq.ext.Setting.integer("tracking_batch_size", 500, minimum=1, help="status updates per write transaction"),
    kiq.ext.Setting.integer(
        "tracking_max_pending", 100_000, minimum=1, help="jobs' updates kept while the database is away"
    ),
    kiq.ext.Setting.number("tracking_shutdown_timeout", 10.0, help="seconds a stopping worker waits to write updates"),
]


class TrackingPlugin:
    """One per config (``plugins = ["tracking"]``, or ``tracker_for(config)``): it holds that config's Tracker."""

    def __init__(self) -> None:
        self._tracker: Tracker | None = None
        self._lock = threading.Lock()

    def tracker(self, config: kiq.Config) -> Tracker:
        """The config's Tracker: its database and writer, made on first use (SQLAlchemy loads then)."""
        tracker = self._tracker
        if tracker is None:
            with self._lock:
                tracker = self._tracker
                if tracker is None:
                    tracker = self._tracker = Tracker(config)
        return tracker

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["track"]  # kiq_options = {"track": True}: a near miss of it (trak) is refused at push

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.prepend(TrackingClientMiddleware, self)  # outermost: it must see every job of a task being created

    @kiq.hookimpl
    def kiq_push_bulk(self, config: kiq.Config, queue: str, count: int) -> AbstractContextManager[None]:
        return rows_written_after_bulk()

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(TrackingServerMiddleware, self)

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        update = death_update(job, exc, config)
        if update is not None:
            self.tracker(config).writer.submit(update)

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], reason: str, config: kiq.Config) -> None:
        if not is_tracked(job) or not isinstance(job.get("jid"), str):
            return
        running = dropping.get()
        if running is not None and running[0] is job:  # inside the tracking layer: it records the outcome
            running[1].append(reason)
        else:  # dropped by an outer layer, before tracking's own ran
            self.tracker(config).writer.submit(dropped_outcome(job, reason, config))

    @kiq.hookimpl
    def kiq_job_progress(self, job: dict[str, Any], done: float, total: float | None, config: kiq.Config) -> None:
        if is_tracked(job) and isinstance(job.get("jid"), str):  # the writer keeps the latest until it flushes
            self.tracker(config).writer.submit(progress_update(job["jid"], done, total))

    @kiq.hookimpl
    def kiq_startup(self, config: kiq.Config) -> None:
        self.tracker(config)  # SQLAlchemy's import and the engine now, not in the worker's first tracked job

    @kiq.hookimpl
    def kiq_shutdown(self, config: kiq.Config) -> None:
        if self._tracker is not None:
            self._tracker.writer.close(config.get("tracking_shutdown_timeout"))

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        """The "Tasks" tab of the dashboard: the newest tasks, and each task with its jobs (see web.py)."""
        return [tasks_tab(lambda: self.tracker(config).store)]

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)
