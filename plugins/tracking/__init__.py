"""Task/event tracking in SQL (seed 002): create a task of many jobs, poll its status, see each job's outcome.

Enable it with ``plugins = ["tracking"]`` (or ``KIQ_PLUGINS=tracking``) in workers; ``create_task`` and
``tracker_for`` add it to the config they use. See the README, "Task and job tracking".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .api import create_task, message, tracker_for
from .middleware import TaskFailure
from .plugin import TrackingPlugin
from .statuses import STATUSES
from .tracker import Tracker

if TYPE_CHECKING:
    from .models import Event, Task

__all__ = [
    "STATUSES",
    "Event",
    "Task",
    "TaskFailure",
    "Tracker",
    "TrackingPlugin",
    "create_task",
    "message",
    "tracker_for",
]


def __getattr__(name: str) -> Any:
    """``Event`` and ``Task`` (the SQLAlchemy models) load on first use: importing the plugin, or ``kiq tracking``'s
    CLI, must not cost SQLAlchemy's import when tracking is off."""
    if name in ("Event", "Task"):
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
