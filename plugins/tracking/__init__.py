"""Task/event tracking in SQL (seed 002): create a task of many jobs, poll its status, see each job's outcome.

Enable it with ``plugins = ["tracking"]`` (or ``KIQ_PLUGINS=tracking``) in workers; ``create_task`` registers
it on the config it uses. See the README, "Task and job tracking".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiq.config import Config, Setting, as_float, as_int, as_str
from kiq.hookspecs import hookimpl
from kiq.middleware import Chain

from .api import Tracker, create_task, existing_tracker, message, tracker_for
from .middleware import TaskFailure, TrackingClientMiddleware, TrackingServerMiddleware, death_update
from .statuses import STATUSES

if TYPE_CHECKING:
    from .models import Event, Task

__all__ = [
    "STATUSES",
    "Event",
    "Task",
    "TaskFailure",
    "Tracker",
    "create_task",
    "message",
    "tracker_for",
]

SETTINGS = [
    Setting("tracking_database_url", "sqlite:///kiq-tracking.db", as_str, "SQLAlchemy URL of the tracking database"),
    Setting("tracking_flush_interval", 0.1, as_float(0.001), "seconds between batched status writes"),
    Setting("tracking_batch_size", 500, as_int(1), "status updates per write transaction"),
    Setting("tracking_max_pending", 100_000, as_int(1), "jobs' updates kept while the database is away"),
    Setting("tracking_shutdown_timeout", 10.0, as_float(0), "seconds a stopping worker waits to write updates"),
]


def __getattr__(name: str) -> Any:
    """``Event`` and ``Task`` (the SQLAlchemy models) load on first use: importing the plugin, or ``kiq tracking``'s
    CLI, must not cost SQLAlchemy's import when tracking is off."""
    if name in ("Event", "Task"):
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def kiq_settings() -> list[Setting]:
    return SETTINGS


@hookimpl
def kiq_client_middleware(chain: Chain[Any], config: Config) -> None:
    chain.prepend(TrackingClientMiddleware)  # outermost: it must see every job of a task being created


@hookimpl
def kiq_server_middleware(chain: Chain[Any], config: Config) -> None:
    chain.add(TrackingServerMiddleware)


@hookimpl
def kiq_death(job: dict[str, Any], exc: BaseException | None, config: Config) -> None:
    update = death_update(job, exc)
    if update is not None:
        tracker_for(config).writer.submit(update)


@hookimpl
def kiq_startup(config: Config) -> None:
    tracker_for(config)  # SQLAlchemy's import and the engine now, not in the worker's first tracked job


@hookimpl
def kiq_shutdown(config: Config) -> None:
    tracker = existing_tracker(config)
    if tracker is not None:
        tracker.writer.close(config.get("tracking_shutdown_timeout"))
